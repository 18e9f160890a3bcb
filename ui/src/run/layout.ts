import ELK from "elkjs/lib/elk-api.js";
import elkWorkerUrl from "elkjs/lib/elk-worker.min.js?url";
import type { GraphEdge, GraphNode } from "../api/types";
import { recall, remember } from "./layoutStore";

// Automatic layout (no hand-placed nodes): elkjs' layered algorithm, left to right.
export const NODE_W = 200;
export const NODE_H = 64;

type Engine = { layout: (graph: ElkGraph) => Promise<ElkGraph> };

// elkjs (1.4 MB) runs in a Web Worker: fetched, parsed and laying out on another thread
// while the main one parses the app, reads the run and draws its timeline (on the main
// thread it was most of a 500-step run page's second)
let elk: Promise<Engine> | null = null;

interface ElkGraph {
  id: string;
  layoutOptions?: Record<string, string>;
  children?: { id: string; width?: number; height?: number; x?: number; y?: number }[];
  edges?: { id: string; sources: string[]; targets: string[] }[];
}

function engine(): Promise<Engine> {
  elk ??=
    typeof Worker === "undefined"
      ? // no workers (jsdom under Vitest): the same engine in this thread
        import("elkjs/lib/elk.bundled.js").then(({ default: Bundled }) => new Bundled() as never)
      : Promise.resolve(new ELK({ workerUrl: elkWorkerUrl }) as never);
  return elk;
}

/** Start the elkjs worker ahead of the first layout (at start-up once signed in): it loads
 * on its own thread, so the page does not wait for it. */
export function preload(): void {
  void engine();
}

export type Positions = Record<string, { x: number; y: number }>;

const BIG = 100;
/** Past BIG steps, one pass of crossing reduction and simple placement: a 500-step
 * playbook laid out in a third of the time, a layout as readable. */
const FAST = { "elk.layered.thoroughness": "1", "elk.layered.nodePlacement.strategy": "SIMPLE" };

// a shape laid out once (per page load here, and in the browser's storage across loads):
// back on a run, or on another run of the same playbook, its graph shows at once
const laidOut = new Map<string, Promise<Positions>>();

export function layout(nodes: GraphNode[], edges: GraphEdge[]): Promise<Positions> {
  const key = shapeKey(nodes, edges);
  let found = laidOut.get(key);
  if (!found) {
    const kept = recall(key, nodes.map((n) => n.id));
    found = kept ? Promise.resolve(kept) : compute(nodes, edges);
    if (!kept) {
      // a failed layout is tried again next time; a good one is kept for the next page load
      found.then((p) => remember(key, p)).catch(() => laidOut.delete(key));
    }
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
