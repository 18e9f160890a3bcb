import { describe, expect, it, vi } from "vitest";
import type { GraphEdge, GraphNode } from "../api/types";
import { seeded } from "../testing/seeded";
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
  it("stacks the branches of each fork in a column between the fork and the join", async () => {
    // p0 forks to a0 and b0, joining at p1, which forks to a1 and b1, joining at p2
    const ids = ["p0", "a0", "b0", "p1", "a1", "b1", "p2"];
    const pairs = [["p0", "a0"], ["p0", "b0"], ["a0", "p1"], ["b0", "p1"], ["p1", "a1"], ["p1", "b1"],
      ["a1", "p2"], ["b1", "p2"]];
    const p = await layout(ids.map((id) => node(id)), pairs.map(([s, t]) => edge(s, t)));
    for (const [s, t] of pairs) expect(p[t].x).toBeGreaterThan(p[s].x + NODE_W - 1);
    for (const [a, b] of [["a0", "b0"], ["a1", "b1"]]) {
      expect(p[a].x).toBe(p[b].x); // one column
      expect(p[b].y).toBeGreaterThanOrEqual(p[a].y + NODE_H); // one under the other
    }
    // the path runs through the middle of its forks
    for (const [s, [a, b]] of [["p0", ["a0", "b0"]], ["p1", ["a1", "b1"]]] as const) {
      expect(p[s].y + NODE_H / 2).toBeCloseTo((p[a].y + p[b].y + NODE_H) / 2);
    }
  });

  it("lays a path of forks out as one straight row of columns", async () => {
    // p0 .. p150, each forking to a and b, which join at the next: one box for elkjs
    const ids: string[] = [];
    const pairs: string[][] = [];
    for (let i = 0; i <= 150; i++) {
      ids.push(`p${i}`);
      if (i < 150) {
        ids.push(`a${i}`, `b${i}`);
        pairs.push([`p${i}`, `a${i}`], [`p${i}`, `b${i}`], [`a${i}`, `p${i + 1}`], [`b${i}`, `p${i + 1}`]);
      }
    }
    const p = await layout(ids.map((id) => node(id)), pairs.map(([s, t]) => edge(s, t)));
    const path = ids.filter((id) => id.startsWith("p"));
    expect(new Set(path.map((id) => p[id].y)).size).toBe(1);
    path.slice(1).forEach((id, i) => expect(p[id].x).toBe(p[path[i]].x + 2 * (NODE_W + 60)));
  });

  it("places every step, the detour between its ends, left to right", async () => {
    const ids = ["start", "x0", "p1", "x1", "p2"];
    const pairs = [["start", "x0"], ["start", "p1"], ["x0", "p1"], ["p1", "x1"], ["p1", "p2"], ["x1", "p2"]];
    const p = await layout(ids.map((id) => node(id)), pairs.map(([s, t]) => edge(s, t)));
    expect(Object.keys(p).sort()).toEqual([...ids].sort());
    for (const [s, t] of pairs) expect(p[t].x).toBeGreaterThan(p[s].x + NODE_W - 1);
  });
});

describe("random graphs", () => {
  it("places every step, no two boxes on each other, whatever joins into chains and columns", async () => {
    const next = seeded(16); // the same graphs every run
    for (let graph = 0; graph < 25; graph++) {
      // a path whose steps may fork to branches that join at the next one, skip ahead or
      // loop back, and arcs at random besides
      const path = Array.from({ length: 3 + Math.floor(next() * 12) }, (_, i) => `g${graph}p${i}`);
      const ids = [...path];
      const pairs: string[][] = [];
      path.slice(1).forEach((to, i) => {
        const from = path[i];
        const kind = next();
        if (kind < 0.4) {
          const branches = Array.from({ length: 1 + Math.floor(next() * 3) }, (_, k) => `${from}b${k}`);
          ids.push(...branches);
          for (const b of branches) pairs.push([from, b], [b, to]);
          if (next() < 0.5) pairs.push([from, to]);
        } else pairs.push([from, to]);
        if (kind > 0.8) pairs.push([from, path[Math.min(path.length - 1, i + 2 + Math.floor(next() * 3))]]);
        if (kind > 0.9) pairs.push([to, path[Math.floor(next() * (i + 1))]]);
      });
      for (let k = Math.floor(next() * 3); k > 0; k--) {
        pairs.push([ids[Math.floor(next() * ids.length)], ids[Math.floor(next() * ids.length)]]);
      }
      const p = await layout(ids.map((id) => node(id)), pairs.map(([s, t]) => edge(s, t)));
      expect(Object.keys(p).sort()).toEqual([...ids].sort());
      for (const a of ids) {
        for (const b of ids) {
          if (a >= b) continue;
          const apart = Math.abs(p[a].x - p[b].x) >= NODE_W || Math.abs(p[a].y - p[b].y) >= NODE_H;
          expect(apart, `graph ${graph}: ${a} and ${b} overlap`).toBe(true);
        }
      }
    }
  }, 60_000);
});

describe("the layout engine", () => {
  it("hands elkjs a path of forks as one box (a chain of columns)", async () => {
    const posted: { cmd?: string; graph?: { children?: unknown[] } }[] = [];
    class FakeWorker {
      onmessage: unknown = null;
      postMessage(message: (typeof posted)[number]) {
        posted.push(message);
      }
      terminate() {}
    }
    vi.resetModules();
    vi.stubGlobal("Worker", FakeWorker);
    try {
      const fresh = await import("./layout");
      const ids = ["p0", "a0", "b0", "c0", "p1", "a1", "b1", "p2"];
      const pairs = [["p0", "a0"], ["p0", "b0"], ["p0", "c0"], ["a0", "p1"], ["b0", "p1"], ["c0", "p1"],
        ["p1", "a1"], ["p1", "b1"], ["a1", "p2"], ["b1", "p2"]];
      void fresh.layout(ids.map((id) => node(id)), pairs.map(([s, t]) => edge(s, t)));
      await vi.waitFor(() => expect(posted.find((m) => m.cmd === "layout")).toBeDefined());
      expect(posted.find((m) => m.cmd === "layout")?.graph?.children).toHaveLength(1);
    } finally {
      vi.unstubAllGlobals();
    }
  });

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
