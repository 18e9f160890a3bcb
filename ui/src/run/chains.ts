// Runs of steps one after the other (each the only next of the one before, and the one
// before the only way in) are laid out as one wide box and spread out again afterwards:
// elkjs' layered layout costs it about a millisecond a node on a cold page, and most of a
// big playbook is such runs (a 500-step chain becomes one box). The spread-out steps sit
// where elkjs would have put them, in a row, one layer apart.

export interface Arc {
  source: string;
  target: string;
}

export interface Chain {
  /** the box standing for the chain in the layout: its first step's id */
  id: string;
  steps: string[];
}

/** The graph's chains (one per step not in a longer one, in `ids` order) and, for every
 * step, the id of its chain's box. */
export function chains(ids: string[], arcs: Arc[]): { chains: Chain[]; boxOf: Map<string, string> } {
  // two arcs between the same steps (a fork's branches as one column, two `when`s to
  // one step) are one way from one to the other
  const { outs, ins } = neighbours(arcs, new Set(ids));
  // the next step that continues a chain: the only arc out, into a step with no other way in
  const next = (id: string): string | undefined => {
    const out = outs.get(id);
    if (out?.size !== 1) return undefined;
    const [to] = out;
    return ins.get(to)?.size === 1 ? to : undefined;
  };
  const continued = new Set<string>();
  for (const id of ids) {
    const n = next(id);
    if (n !== undefined) continued.add(n);
  }
  const boxOf = new Map<string, string>();
  const found: Chain[] = [];
  for (const head of ids) {
    if (continued.has(head) || boxOf.has(head)) continue;
    const steps = [head];
    boxOf.set(head, head);
    for (let n = next(head); n !== undefined && !boxOf.has(n); n = next(n)) {
      steps.push(n);
      boxOf.set(n, head);
    }
    found.push({ id: head, steps });
  }
  // steps of a ring with no way in from outside have no head: each its own box
  for (const id of ids) {
    if (!boxOf.has(id)) {
      boxOf.set(id, id);
      found.push({ id, steps: [id] });
    }
  }
  return { chains: found, boxOf };
}

/** The arcs without those beside another way between the same steps: u -> w where u also
 * leads to w through other steps (u -> v -> w, or further). elkjs would reserve a lane
 * through every layer such an arc spans, which is never drawn (React Flow draws each arc
 * from the steps' positions, one between steps of a row as an arch over it: RunGraph), and
 * without it the steps sit where they did (a step's layer is the longest way to it, which
 * the arc is not), while far more of the graph becomes chains: a 500-step playbook of
 * detours, or of steps that may skip some of the next ones, is one box for elkjs, not 500
 * boxes and thousands of lanes. An arc is left out only beside a way of arcs still kept, so
 * every step reaches all it did (of two ways round a ring, one stays). */
export function withoutShortcuts<A extends Arc>(arcs: A[]): A[] {
  // `outs` holds the arcs kept: an arc left out is taken out of it at once
  const { outs } = neighbours(arcs);
  // whether kept arcs other than u -> w lead from u to w; past SEARCH steps looked at, the
  // arc is kept (a bound on the cost in a huge graph, where keeping an arc is always safe)
  const around = (u: string, w: string): boolean => {
    const seen = new Set([u, w]);
    const todo = [u];
    while (todo.length && seen.size < SEARCH) {
      const x = todo.pop()!;
      for (const y of outs.get(x) ?? []) {
        if (x === u && y === w) continue;
        if (y === w) return true;
        if (!seen.has(y)) {
          seen.add(y);
          todo.push(y);
        }
      }
    }
    return false;
  };
  let left = 0;
  for (const [u, to] of outs) {
    for (const w of to) {
      if (around(u, w)) {
        to.delete(w);
        left++;
      }
    }
  }
  // a step's arc to itself is in no `outs`, and kept
  return left ? arcs.filter((a) => a.source === a.target || outs.get(a.source)?.has(a.target)) : arcs;
}

const SEARCH = 2000;

/** The branches of forks that join again: two or more steps reached only from the same
 * step and leading only to the same next one, by the id of the first (in `ids` order) to
 * the ids of all. elkjs would put them in one layer, one above the other; laid out as one
 * box (a column), the fork and its join become a chain too: a 500-step playbook of
 * fan-outs that join is one box, not 500. */
export function siblings(ids: string[], arcs: Arc[]): Map<string, string[]> {
  const { outs, ins } = neighbours(arcs, new Set(ids));
  const byEnds = new Map<string, string[]>();
  for (const id of ids) {
    const [from, to] = [ins.get(id), outs.get(id)];
    if (from?.size !== 1 || to?.size !== 1) continue;
    const [u] = from;
    const [w] = to;
    if (u === w || u === id || w === id) continue;
    const key = `${u}\u0000${w}`;
    const found = byEnds.get(key);
    if (found) found.push(id);
    else byEnds.set(key, [id]);
  }
  const out = new Map<string, string[]>();
  for (const members of byEnds.values()) if (members.length > 1) out.set(members[0], members);
  return out;
}

/** Each step's next steps and the steps before it (no step's arc to itself; with `known`,
 * only arcs between known steps). */
function neighbours(arcs: Arc[], known?: Set<string>) {
  const outs = new Map<string, Set<string>>();
  const ins = new Map<string, Set<string>>();
  for (const { source, target } of arcs) {
    if (source === target || (known && !(known.has(source) && known.has(target)))) continue;
    if (!outs.has(source)) outs.set(source, new Set());
    if (!ins.has(target)) ins.set(target, new Set());
    outs.get(source)!.add(target);
    ins.get(target)!.add(source);
  }
  return { outs, ins };
}
