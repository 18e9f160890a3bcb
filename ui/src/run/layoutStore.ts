import type { Positions } from "./layout";

// Laid-out shapes kept in the browser between page loads: elkjs' answer for a shape does
// not change, and a 500-step playbook takes it most of a second to lay out on a cold page
// (every run of a playbook has its shape, so each one opens on positions known already).
// Bump VERSION when the layout options change: the old positions are then not used.
// 2: chains laid out as one box (chains.ts); 3: no arcs over detours; 4: forks' branches as
// columns; 5: no arc beside a longer way, arcs routed straight; 6: big graphs layered by
// longest path, arcs merged at a side
const VERSION = 6;
export const PREFIX = `milepost.layout.v${VERSION}:`;
const INDEX = `${PREFIX}index`;
const KEEP = 20; // shapes kept, the last used first: a few hundred kB at most

/** A short name for a shape's key (53-bit cyrb53): the key of a big graph is long. */
export function shapeHash(key: string): string {
  let h1 = 0xdeadbeef;
  let h2 = 0x41c6ce57;
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 2654435761);
    h2 = Math.imul(h2 ^ c, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return (4294967296 * (2097151 & h2) + (h1 >>> 0)).toString(36);
}

function index(): string[] {
  try {
    const list = JSON.parse(localStorage.getItem(INDEX) ?? "[]");
    return Array.isArray(list) ? list : [];
  } catch {
    return [];
  }
}

/** The positions stored for a shape, if they are for these steps (else null). */
export function recall(key: string, ids: string[]): Positions | null {
  try {
    const text = localStorage.getItem(PREFIX + shapeHash(key));
    if (!text) return null;
    const positions = JSON.parse(text) as Positions;
    const all = ids.every((id) => typeof positions[id]?.x === "number" && typeof positions[id]?.y === "number");
    return all && Object.keys(positions).length === ids.length ? positions : null;
  } catch {
    return null; // no storage (a private window) or a damaged entry: lay out again
  }
}

/** Keep a shape's positions, dropping the least recently stored past KEEP shapes. */
export function remember(key: string, positions: Positions): void {
  const name = shapeHash(key);
  try {
    const list = [name, ...index().filter((n) => n !== name)];
    for (const old of list.splice(KEEP)) localStorage.removeItem(PREFIX + old);
    localStorage.setItem(PREFIX + name, JSON.stringify(positions));
    localStorage.setItem(INDEX, JSON.stringify(list));
  } catch {
    // storage full or refused: the layout is only not kept for the next page load
  }
}
