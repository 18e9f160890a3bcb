import { beforeEach, describe, expect, it, vi } from "vitest";
import type { GraphEdge, GraphNode } from "../api/types";
import { PREFIX, recall, remember, shapeHash } from "./layoutStore";

const node = (id: string) =>
  ({ id, desc: null, kind: "noop", tasks: 1, loop: false, status: "PENDING", runs: 0, iterations: null }) as GraphNode;
const edge = (source: string, target: string) =>
  ({ id: `${source}->${target}#0`, source, target, kind: "next", conditional: false }) as GraphEdge;

beforeEach(() => localStorage.clear());

describe("laid-out shapes kept between page loads", () => {
  it("gives back a shape's positions only for the same steps", () => {
    remember("a\u0000b", { a: { x: 0, y: 0 }, b: { x: 260, y: 0 } });
    expect(recall("a\u0000b", ["a", "b"])).toEqual({ a: { x: 0, y: 0 }, b: { x: 260, y: 0 } });
    expect(recall("a\u0000b", ["a", "c"])).toBeNull(); // not these steps: laid out again
    expect(recall("a\u0000c", ["a", "c"])).toBeNull();
    expect(shapeHash("a\u0000b")).not.toBe(shapeHash("a\u0000c"));
  });

  it("keeps the last 20 shapes, not every one ever opened", () => {
    for (let i = 0; i < 25; i++) remember(`shape${i}`, { [`s${i}`]: { x: i, y: 0 } });
    expect(recall("shape0", ["s0"])).toBeNull();
    expect(recall("shape24", ["s24"])).toEqual({ s24: { x: 24, y: 0 } });
    expect(recall("shape5", ["s5"])).toEqual({ s5: { x: 5, y: 0 } });
    expect(Object.keys(localStorage).length).toBe(21); // 20 shapes and their index
  });

  it("lays out nothing on the next page load of a shape laid out before", async () => {
    const nodes = [node("start"), node("end")];
    const edges = [edge("start", "end")];
    vi.resetModules();
    const first = await (await import("./layout")).layout(nodes, edges);
    vi.resetModules(); // another page load: nothing in memory
    const made: string[] = [];
    vi.stubGlobal(
      "Worker",
      class {
        constructor(url: string) {
          made.push(url);
        }
        postMessage() {}
      },
    );
    try {
      const again = await (await import("./layout")).layout(nodes, edges);
      expect(again).toEqual(first);
      expect(made).toEqual([]); // no elkjs started for it
    } finally {
      vi.unstubAllGlobals();
    }
  });

  it("lays out again a damaged entry", () => {
    remember("k", { a: { x: 1, y: 2 } });
    localStorage.setItem(PREFIX + shapeHash("k"), "{not json");
    expect(recall("k", ["a"])).toBeNull();
  });

  it("does not use positions kept by an older layout", () => {
    localStorage.setItem(`milepost.layout.v1:${shapeHash("k")}`, JSON.stringify({ a: { x: 1, y: 2 } }));
    expect(PREFIX).not.toBe("milepost.layout.v1:");
    expect(recall("k", ["a"])).toBeNull();
  });
});
