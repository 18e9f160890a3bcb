import { describe, expect, it, vi } from "vitest";
import type { GraphEdge, GraphNode } from "../api/types";
import { layout } from "./layout";

const node = (id: string, status = "PENDING") =>
  ({ id, desc: null, kind: "noop", tasks: 1, loop: false, status, runs: 0, iterations: null }) as GraphNode;
const edge = (source: string, target: string) =>
  ({ id: `${source}->${target}#0`, source, target, kind: "next", conditional: false }) as GraphEdge;

describe("layout", () => {
  it("lays a shape out once: another status, the same positions at once", async () => {
    const first = layout([node("start"), node("end")], [edge("start", "end")]);
    const again = layout([node("start", "COMPLETED"), node("end", "RUNNING")], [edge("start", "end")]);
    expect(again).toBe(first);
    const positions = await first;
    expect(positions.end.x).toBeGreaterThan(positions.start.x); // left to right
    expect(layout([node("start"), node("other")], [edge("start", "other")])).not.toBe(first);
  });
});

describe("the layout engine", () => {
  it("runs elkjs in a Web Worker where the browser has them (the page's thread stays free)", async () => {
    const made: string[] = [];
    class FakeWorker {
      onmessage: unknown = null;
      constructor(url: string | URL) {
        made.push(String(url));
      }
      postMessage() {}
      terminate() {}
    }
    vi.resetModules();
    vi.stubGlobal("Worker", FakeWorker);
    try {
      const fresh = await import("./layout");
      fresh.preload();
      fresh.preload(); // one worker, however often asked
      expect(made).toHaveLength(1);
      expect(made[0]).toMatch(/elk-worker\.min\.js/);
    } finally {
      vi.unstubAllGlobals();
    }
  });
});
