import { describe, expect, it, vi } from "vitest";
import type { GraphEdge, GraphNode } from "../api/types";
import { layout, NODE_H, NODE_W } from "./layout";

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

describe("a graph with chains", () => {
  it("spreads each chain's steps out in a row, left to right, none on another", async () => {
    // start -> a1..a5 -> fork to b and c1 -> c2 -> c3, both joining at end
    const ids = ["start", "a1", "a2", "a3", "a4", "a5", "b", "c1", "c2", "c3", "end"];
    const pairs = [["start", "a1"], ["a1", "a2"], ["a2", "a3"], ["a3", "a4"], ["a4", "a5"], ["a5", "b"],
      ["a5", "c1"], ["c1", "c2"], ["c2", "c3"], ["b", "end"], ["c3", "end"]];
    const p = await layout(ids.map((id) => node(id)), pairs.map(([s, t]) => edge(s, t)));
    expect(Object.keys(p).sort()).toEqual([...ids].sort());
    for (const [s, t] of pairs) expect(p[t].x).toBeGreaterThan(p[s].x + NODE_W - 1);
    for (const row of [["start", "a1", "a2", "a3", "a4", "a5"], ["c1", "c2", "c3"]]) {
      expect(new Set(row.map((id) => p[id].y)).size).toBe(1);
    }
    for (const a of ids) {
      for (const b of ids) {
        if (a === b) continue;
        const apart = Math.abs(p[a].x - p[b].x) >= NODE_W || Math.abs(p[a].y - p[b].y) >= NODE_H;
        expect(apart, `${a} and ${b} overlap`).toBe(true);
      }
    }
  });
});

describe("a path with detours", () => {
  it("places every step, the detour between its ends, left to right", async () => {
    const ids = ["start", "x0", "p1", "x1", "p2"];
    const pairs = [["start", "x0"], ["start", "p1"], ["x0", "p1"], ["p1", "x1"], ["p1", "p2"], ["x1", "p2"]];
    const p = await layout(ids.map((id) => node(id)), pairs.map(([s, t]) => edge(s, t)));
    expect(Object.keys(p).sort()).toEqual([...ids].sort());
    for (const [s, t] of pairs) expect(p[t].x).toBeGreaterThan(p[s].x + NODE_W - 1);
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
