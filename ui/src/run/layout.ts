import type { GraphEdge, GraphNode } from "../api/types";

// Automatic layout (no hand-placed nodes): elkjs' layered algorithm, left to right.
export const NODE_W = 200;
export const NODE_H = 64;

// elkjs is most of the bundle: loaded with the first run page, not with the runs list
let elk: Promise<{ layout: (graph: ElkGraph) => Promise<ElkGraph> }> | null = null;

interface ElkGraph {
  id: string;
  layoutOptions?: Record<string, string>;
  children?: { id: string; width?: number; height?: number; x?: number; y?: number }[];
  edges?: { id: string; sources: string[]; targets: string[] }[];
}

function engine() {
  elk ??= import("elkjs/lib/elk.bundled.js").then(({ default: ELK }) => new ELK() as never);
  return elk;
}

export type Positions = Record<string, { x: number; y: number }>;

export async function layout(nodes: GraphNode[], edges: GraphEdge[]): Promise<Positions> {
  const ids = new Set(nodes.map((n) => n.id));
  const result = await (await engine()).layout({
    id: "root",
    layoutOptions: {
      "elk.algorithm": "layered",
      "elk.direction": "RIGHT",
      "elk.layered.spacing.nodeNodeBetweenLayers": "60",
      "elk.spacing.nodeNode": "30",
    },
    children: nodes.map((n) => ({ id: n.id, width: NODE_W, height: NODE_H })),
    edges: edges
      .filter((e) => ids.has(e.source) && ids.has(e.target))
      .map((e) => ({ id: e.id, sources: [e.source], targets: [e.target] })),
  });
  const out: Positions = {};
  for (const c of result.children ?? []) out[c.id] = { x: c.x ?? 0, y: c.y ?? 0 };
  return out;
}

/** The graph's shape: it changes only when steps or arcs do, not when a status does, so a
 * live update re-colours nodes without laying them out again. */
export function shapeKey(nodes: GraphNode[], edges: GraphEdge[]): string {
  return nodes.map((n) => n.id).join("\u0000") + "\u0001" + edges.map((e) => e.id).join("\u0000");
}
