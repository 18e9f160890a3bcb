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

/** Load and parse elkjs ahead of the first run page (called once signed in, when idle). */
export function preload(): void {
  void engine();
}

export type Positions = Record<string, { x: number; y: number }>;

const BIG = 100;
/** Past BIG steps, one pass of crossing reduction and simple placement: a 500-step
 * playbook laid out in a third of the time, a layout as readable. */
const FAST = { "elk.layered.thoroughness": "1", "elk.layered.nodePlacement.strategy": "SIMPLE" };

// a shape laid out once per page load: back on a run, or on another run of the same
// playbook, its graph shows at once
const laidOut = new Map<string, Promise<Positions>>();

export function layout(nodes: GraphNode[], edges: GraphEdge[]): Promise<Positions> {
  const key = shapeKey(nodes, edges);
  let found = laidOut.get(key);
  if (!found) {
    found = compute(nodes, edges);
    found.catch(() => laidOut.delete(key)); // a failed layout is tried again next time
    laidOut.set(key, found);
  }
  return found;
}

async function compute(nodes: GraphNode[], edges: GraphEdge[]): Promise<Positions> {
  const ids = new Set(nodes.map((n) => n.id));
  const result = await (await engine()).layout({
    id: "root",
    layoutOptions: {
      "elk.algorithm": "layered",
      "elk.direction": "RIGHT",
      "elk.layered.spacing.nodeNodeBetweenLayers": "60",
      "elk.spacing.nodeNode": "30",
      ...(nodes.length > BIG ? FAST : {}),
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
