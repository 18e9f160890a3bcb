import { describe, expect, it } from "vitest";
import { seeded } from "../testing/seeded";
import { chains, siblings, withoutShortcuts } from "./chains";

const arcs = (...pairs: string[]) =>
  pairs.map((p) => {
    const [source, target] = p.split(">");
    return { source, target };
  });

const steps = (ids: string[], list: ReturnType<typeof arcs>) => chains(ids, list).chains.map((c) => c.steps);

describe("chains", () => {
  it("makes one box of a straight run of steps", () => {
    const ids = Array.from({ length: 500 }, (_, i) => `s${i}`);
    const list = ids.slice(1).map((id, i) => ({ source: ids[i], target: id }));
    const { chains: found, boxOf } = chains(ids, list);
    expect(found).toEqual([{ id: "s0", steps: ids }]);
    expect(boxOf.get("s499")).toBe("s0");
  });

  it("ends a chain where a step branches or another way comes in", () => {
    // a -> b -> c, c branches to d and e, which join at f -> g
    const list = arcs("a>b", "b>c", "c>d", "c>e", "d>f", "e>f", "f>g");
    expect(steps(["a", "b", "c", "d", "e", "f", "g"], list)).toEqual([["a", "b", "c"], ["d"], ["e"], ["f", "g"]]);
  });

  it("keeps a loop back into a chain out of it, and a ring nobody enters as single steps", () => {
    expect(steps(["a", "b", "c", "d"], arcs("a>b", "b>c", "c>b", "c>d"))).toEqual([["a"], ["b", "c"], ["d"]]);
    expect(steps(["x", "y"], arcs("x>y", "y>x"))).toEqual([["x"], ["y"]]);
  });

  it("takes two arcs between the same steps for one way", () => {
    expect(steps(["a", "b", "c"], arcs("a>b", "a>b", "b>c"))).toEqual([["a", "b", "c"]]);
  });

  it("ignores arcs to steps it was not given and a step's arc to itself", () => {
    expect(steps(["a", "b"], arcs("a>b", "b>b", "b>gone", "gone>a"))).toEqual([["a", "b"]]);
  });
});

describe("withoutShortcuts", () => {
  it("drops an arc over a one-step detour, so the path and its detours are one chain", () => {
    // p0 -> x0 -> p1 -> x1 -> p2, and p0 -> p1, p1 -> p2 past each x
    const list = arcs("p0>x0", "p0>p1", "x0>p1", "p1>x1", "p1>p2", "x1>p2");
    const kept = withoutShortcuts(list);
    expect(kept).toEqual(arcs("p0>x0", "x0>p1", "p1>x1", "x1>p2"));
    expect(steps(["p0", "x0", "p1", "x1", "p2"], kept)).toEqual([["p0", "x0", "p1", "x1", "p2"]]);
  });

  it("drops an arc beside a longer way, so steps that may skip some of the next are a chain", () => {
    // b has another way in (z), c another way out (y): still a way from a to d without a > d
    expect(withoutShortcuts(arcs("a>b", "z>b", "b>d", "a>d"))).toEqual(arcs("a>b", "z>b", "b>d"));
    expect(withoutShortcuts(arcs("a>c", "c>d", "c>y", "a>d"))).toEqual(arcs("a>c", "c>d", "c>y"));
    expect(withoutShortcuts(arcs("a>b", "b>c", "c>d", "a>d"))).toEqual(arcs("a>b", "b>c", "c>d"));
    // 500 steps, each with an arc to the next, one to the step after it and one 7 on
    const ids = Array.from({ length: 500 }, (_, i) => `s${i}`);
    const list = ids.flatMap((_, i) =>
      [i + 1, i + 2, i + 7].filter((j) => j < ids.length).map((j) => ({ source: ids[i], target: ids[j] })),
    );
    expect(steps(ids, withoutShortcuts(list))).toEqual([ids]);
  });

  it("keeps an arc that is the only way, and one of two ways round a ring", () => {
    const list = arcs("a>b", "a>c", "b>d", "c>b");
    expect(withoutShortcuts(list)).toEqual(arcs("a>c", "b>d", "c>b")); // a > b also by c
    const tree = arcs("a>b", "a>c", "b>d");
    expect(withoutShortcuts(tree)).toBe(tree); // nothing to drop: the same list
    // u and v lead to each other and both to w: one of the arcs into w stays
    const ring = withoutShortcuts(arcs("u>v", "v>u", "u>w", "v>w"));
    expect(ring.filter((a) => a.target === "w")).toHaveLength(1);
    expect(ring).toContainEqual({ source: "u", target: "v" });
    expect(ring).toContainEqual({ source: "v", target: "u" });
  });
});

describe("withoutShortcuts on random graphs", () => {
  // the steps reached from `from` by one arc or more (a step's arc to itself aside)
  function reach(arcs: { source: string; target: string }[], from: string): Set<string> {
    const seen = new Set<string>();
    const todo = [from];
    while (todo.length) {
      const x = todo.pop()!;
      for (const a of arcs) if (a.source === x && a.target !== a.source && !seen.has(a.target)) (seen.add(a.target), todo.push(a.target));
    }
    return seen;
  }

  it("keeps every step reaching the steps it reached, with a subset of the arcs, rings included", () => {
    const next = seeded(15); // the same graphs every run
    for (let graph = 0; graph < 300; graph++) {
      const n = 2 + Math.floor(next() * 12);
      const list = Array.from({ length: Math.floor(next() * n * 3) }, () => ({
        source: `s${Math.floor(next() * n)}`,
        target: `s${Math.floor(next() * n)}`,
      }));
      const kept = withoutShortcuts(list);
      for (const a of kept) expect(list).toContain(a);
      for (let i = 0; i < n; i++) {
        const want = reach(list, `s${i}`);
        expect(reach(kept, `s${i}`), `graph ${graph}, from s${i}`).toEqual(want);
      }
    }
  });
});

describe("siblings", () => {
  it("makes a column of the branches of a fork that join again, by its first branch", () => {
    // p0 forks to a0, b0, c0, which join at p1; p1 forks to a1 and b1, joining at p2
    const list = arcs("p0>a0", "p0>b0", "p0>c0", "a0>p1", "b0>p1", "c0>p1", "p1>a1", "p1>b1", "a1>p2", "b1>p2");
    const ids = ["p0", "a0", "b0", "c0", "p1", "a1", "b1", "p2"];
    expect([...siblings(ids, list)]).toEqual([["a0", ["a0", "b0", "c0"]], ["a1", ["a1", "b1"]]]);
  });

  it("leaves alone branches that go on to different steps, come from several, or stand alone", () => {
    // a and b leave p for different steps; c and d both join q but c is also reached from a
    const list = arcs("p>a", "p>b", "a>q", "b>r", "p>c", "a>c", "c>q", "p>d", "d>q", "x>y");
    expect(siblings(["p", "a", "b", "c", "d", "q", "r", "x", "y"], list).size).toBe(0);
  });
});
