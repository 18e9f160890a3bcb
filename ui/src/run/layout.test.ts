import { describe, expect, it } from "vitest";
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
