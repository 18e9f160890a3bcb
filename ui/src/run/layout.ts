import ELK from "elkjs/lib/elk-api.js";
import elkWorkerUrl from "elkjs/lib/elk-worker.min.js?url";
import type { GraphEdge, GraphNode } from "../api/types";
import { chains, siblings, withoutShortcuts } from "./chains";
import { recall, remember } from "./layoutStore";

// Automatic layout (no hand-placed nodes): elkjs' layered algorithm, left to right.
export const NODE_W = 200;
export const NODE_H = 64;
export const LAYER_GAP = 60;
const ROW_GAP = 30; // elk.spacing.nodeNode: between steps of one layer

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

/** The worker index.html started before the app loaded (vite.config.ts), else a new one. */
function adopt(url?: string): Worker {
  const w = window as { __milepostElk?: Worker };
  const early = w.__milepostElk;
  delete w.__milepostElk; // one engine owns it
  return early ?? new Worker(url as string);
}

function engine(): Promise<Engine> {
  elk ??=
    typeof Worker === "undefined"
      ? // no workers (jsdom under Vitest): the same engine in this thread
        import("elkjs/lib/elk.bundled.js").then(({ default: Bundled }) => new Bundled() as never)
      : Promise.resolve(new ELK({ workerUrl: elkWorkerUrl, workerFactory: adopt }) as never);
  return elk;
}

/** Start the elkjs worker ahead of the first layout (at start-up once signed in): it loads
 * on its own thread, so the page does not wait for it. (Warming its JIT up with made-up
 * layouts there was tried: it made a cold 500-step layout 0.4 s faster but queued a small
 * graph's layout behind it, and the 100k-iteration loop's page went from 0.45 to 1.2 s; small
 * ones posted one at a time gained nothing: started by index.html, the worker is still
 * parsing elkjs when the graph comes.) */
export function preload(): void {
  void engine();
}

const BIG = 100;
/** Past BIG boxes (steps, a chain counting once), one pass of crossing reduction and
 * simple placement: a 500-step playbook laid out in a third of the time, as readable. A
 * step's layer is its longest path from a start (network simplex took a fifth of a cold
 * 500-box layout), a step's arcs share one port a side (elkjs sizes and places every port
 * of every box, the largest share of a cold layout), and the graph is laid out whole, not
 * component by component: together about 0.1 s off a 20 x 25 grid's first visit. */
const FAST = {
  "elk.layered.thoroughness": "1",
  "elk.layered.nodePlacement.strategy": "SIMPLE",
  "elk.layered.layering.strategy": "LONGEST_PATH_SOURCE",
  "elk.layered.mergeEdges": "true",
  "elk.separateConnectedComponents": "false",
};

function options(boxes: number): Record<string, string> {
  return {
    "elk.algorithm": "layered",
    "elk.direction": "RIGHT",
    // elkjs' arcs are not drawn (React Flow draws its own from the positions): straight
    // lines are the cheapest to route, and layers stay LAYER_GAP apart (orthogonal routing
    // widens a gap by the arcs crossing it)
    "elk.edgeRouting": "POLYLINE",
    "elk.layered.spacing.nodeNodeBetweenLayers": String(LAYER_GAP),
    "elk.spacing.nodeNode": String(ROW_GAP),
    ...(boxes > BIG ? FAST : {}),
  };
}

export type Positions = Record<string, { x: number; y: number }>;

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
  const ids = nodes.map((n) => n.id);
  // the branches of a fork that join again are one column (`siblings`), an arc beside a
  // longer way between its steps is left out (`withoutShortcuts`), and a chain of columns
  // is one box as wide as its columns one layer apart and as tall as its tallest (`chains`)
  const columns = siblings(ids, edges);
  const columnOf = new Map<string, string>();
  for (const [head, members] of columns) for (const m of members) columnOf.set(m, head);
  const col = (id: string) => columnOf.get(id) ?? id;
  const heads = ids.filter((id) => col(id) === id);
  const kept = withoutShortcuts(edges.map((e) => ({ source: col(e.source), target: col(e.target) })));
  const { chains: boxes, boxOf } = chains(heads, kept);
  const arcs = new Map<string, { id: string; sources: string[]; targets: string[] }>();
  for (const e of kept) {
    const [source, target] = [boxOf.get(e.source), boxOf.get(e.target)];
    if (source === undefined || target === undefined || source === target) continue;
    const id = `${source}\u0000${target}`;
    if (!arcs.has(id)) arcs.set(id, { id, sources: [source], targets: [target] });
  }
  const rows = (head: string) => columns.get(head)?.length ?? 1;
  const tall = (n: number) => n * NODE_H + (n - 1) * ROW_GAP;
  const height = (steps: string[]) => tall(Math.max(...steps.map(rows)));
  const result = await (await engine()).layout({
    id: "root",
    layoutOptions: options(boxes.length),
    children: boxes.map((b) => ({
      id: b.id,
      width: b.steps.length * NODE_W + (b.steps.length - 1) * LAYER_GAP,
      height: height(b.steps),
    })),
    edges: [...arcs.values()],
  });
  const at = new Map((result.children ?? []).map((c) => [c.id, { x: c.x ?? 0, y: c.y ?? 0 }]));
  const out: Positions = {};
  for (const b of boxes) {
    const { x, y } = at.get(b.id) ?? { x: 0, y: 0 };
    const h = height(b.steps);
    b.steps.forEach((head, i) => {
      const members = columns.get(head) ?? [head];
      const top = y + (h - tall(members.length)) / 2; // a column centred on its box's middle
      members.forEach((id, k) => (out[id] = { x: x + i * (NODE_W + LAYER_GAP), y: top + k * (NODE_H + ROW_GAP) }));
    });
  }
  return out;
}

/** The graph's shape: it changes only when steps or arcs do, not when a status does, so a
 * live update re-colours nodes without laying them out again. */
export function shapeKey(nodes: GraphNode[], edges: GraphEdge[]): string {
  return nodes.map((n) => n.id).join("\u0000") + "\u0001" + edges.map((e) => e.id).join("\u0000");
}
