import { describe, expect, it } from "vitest";
import type { GraphNode, RunGraph } from "../api/types";
import { archPath, arched } from "./arches";
import { layout, NODE_H, NODE_W } from "./layout";
import { toFlow } from "./RunGraph";

const node = (id: string) =>
  ({ id, desc: null, kind: "noop", tasks: 1, loop: false, status: "PENDING", runs: 0, iterations: null }) as GraphNode;

describe("arcs along a row", () => {
  it("arches an arc over a step, and one going back, but not one to the next step or another row", () => {
    const step = NODE_W + 60;
    expect(arched({ x: 0, y: 0 }, { x: step, y: 0 })).toBe(false); // the next step
    expect(arched({ x: 0, y: 0 }, { x: 2 * step, y: 0 })).toBe(true); // over one
    expect(arched({ x: 2 * step, y: 0 }, { x: 0, y: 0 })).toBe(true); // back along the row
    expect(arched({ x: 0, y: 0 }, { x: 2 * step, y: 94 })).toBe(false); // another row
  });

  it("draws an arch over the boxes it passes going on and under them going back", () => {
    const controls = (path: string) => path.split(/[ ,MC]+/).filter(Boolean).map(Number);
    const on = controls(archPath(200, 32, 720, 32));
    expect(on.slice(0, 2)).toEqual([200, 32]);
    expect(on.slice(-2)).toEqual([720, 32]);
    // a cubic's highest point is 3/4 of the way to its control points: above the boxes' tops
    expect(32 + 0.75 * (on[3] - 32)).toBeLessThan(0);
    const back = controls(archPath(720, 32, 200, 32));
    expect(32 + 0.75 * (back[3] - 32)).toBeGreaterThan(NODE_H);
  });

  it("draws the arcs of steps that may skip the next as arches over their row", async () => {
    const ids = Array.from({ length: 6 }, (_, i) => `s${i}`);
    const edges = ids.flatMap((_, i) =>
      [i + 1, i + 2].filter((j) => j < ids.length).map((j) => ({
        id: `s${i}->s${j}#0`, source: `s${i}`, target: `s${j}`, kind: "next", conditional: j === i + 2,
      })),
    );
    const graph: RunGraph = { execution_id: "1", status: "RUNNING", entry_step: "s0", nodes: ids.map(node), edges };
    const flow = toFlow(graph, await layout(graph.nodes, graph.edges));
    expect(new Set(flow.nodes.map((n) => n.position.y)).size).toBe(1); // one row
    for (const e of flow.edges) expect(e.type).toBe(e.target === `s${Number(e.source.slice(1)) + 2}` ? "arch" : undefined);
  });
});
