import { describe, expect, it } from "vitest";
import type { GraphEdge, GraphNode } from "../api/types";
import { layout, type Positions } from "./layout";
import { firstView, VIEW_W } from "./viewport";

const node = (id: string) =>
  ({ id, desc: null, kind: "noop", tasks: 1, loop: false, status: "PENDING", runs: 0, iterations: null }) as GraphNode;
const edge = (source: string, target: string) =>
  ({ id: `${source}->${target}#0`, source, target, kind: "next", conditional: false }) as GraphEdge;

function chain(n: number): { nodes: GraphNode[]; edges: GraphEdge[] } {
  const ids = Array.from({ length: n }, (_, i) => (i === 0 ? "start" : `s${i}`));
  return { nodes: ids.map(node), edges: ids.slice(1).map((id, i) => edge(ids[i], id)) };
}

describe("the first view of a graph", () => {
  it("fits a small graph whole", async () => {
    const { nodes, edges } = chain(3);
    expect(firstView(await layout(nodes, edges), "start")).toBeNull();
  });

  it("opens a 500-step chain (laid out by elkjs) on its entry step and the few after it", async () => {
    const { nodes, edges } = chain(500);
    const positions = await layout(nodes, edges);
    const ids = firstView(positions, "start")!;
    expect(ids[0]).toBe("start");
    expect(ids).toEqual(["start", "s1", "s2", "s3", "s4", "s5"].slice(0, ids.length));
    expect(ids.length).toBeGreaterThanOrEqual(4); // readable, not 500 dots
    for (const id of ids) expect(positions[id].x - positions.start.x).toBeLessThan(VIEW_W);
  }, 30_000);

  it("holds the steps around the entry, above and below it, not only after it", () => {
    const positions: Positions = { a: { x: 0, y: 0 }, start: { x: 300, y: 400 }, up: { x: 600, y: 200 }, down: { x: 600, y: 600 }, far: { x: 5000, y: 400 } };
    expect(firstView(positions, "start")?.sort()).toEqual(["down", "start", "up"]);
  });
});
