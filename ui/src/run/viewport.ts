import { NODE_H, NODE_W, type Positions } from "./layout";

/** What a readable first view holds, in layout pixels: at the graph's 420 px height and a
 * page's width, about 0.6 zoom (names still legible). */
export const VIEW_W = 1600;
export const VIEW_H = 700;

/** The steps the graph first fits into view: all of them when they fit a readable box,
 * else those in such a box that starts at the entry step (its left edge, centred on it), so
 * a 500-step playbook opens on where it starts, not on 500 dots. `null`: all of them. */
export function firstView(positions: Positions, entry: string): string[] | null {
  const all = Object.entries(positions);
  if (all.length === 0) return null;
  const xs = all.map(([, p]) => p.x);
  const ys = all.map(([, p]) => p.y);
  const fits =
    Math.max(...xs) + NODE_W - Math.min(...xs) <= VIEW_W && Math.max(...ys) + NODE_H - Math.min(...ys) <= VIEW_H;
  const start = positions[entry];
  if (fits || !start) return null;
  const top = start.y + NODE_H / 2 - VIEW_H / 2;
  return all
    .filter(([, p]) => p.x >= start.x && p.x + NODE_W <= start.x + VIEW_W && p.y >= top && p.y + NODE_H <= top + VIEW_H)
    .map(([id]) => id);
}
