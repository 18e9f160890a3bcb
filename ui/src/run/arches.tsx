import { BaseEdge, type EdgeProps } from "@xyflow/react";
import { memo } from "react";
import { LAYER_GAP, NODE_H, NODE_W } from "./layout";

// React Flow draws an arc as a curve from its step's right side to the next one's left
// side. Between steps of one row that are not neighbours (an arc over a step, which the
// layout leaves out: chains.ts, or a loop back along the row) that curve would run through
// the steps between, under their boxes: such an arc is drawn as an arch over the row
// instead (under it when it goes back), as high as its boxes and more the further it goes.

type At = { x: number; y: number };

/** Whether the arc from a step at `from` to one at `to` is drawn as an arch. */
export function arched(from: At, to: At): boolean {
  const dx = to.x - from.x;
  return from.y === to.y && !(dx > 0 && dx <= NODE_W + LAYER_GAP);
}

/** The SVG path of an arch from the source's handle to the target's. */
export function archPath(sx: number, sy: number, tx: number, ty: number): string {
  const up = tx > sx ? -1 : 1;
  // a cubic's middle is 3/4 of the way to its control points: over half a box, and more
  const rise = up * (NODE_H + Math.min(Math.abs(tx - sx) / 8, 2 * NODE_H));
  const reach = LAYER_GAP * 2;
  return `M ${sx},${sy} C ${sx + reach},${sy + rise} ${tx - reach},${ty + rise} ${tx},${ty}`;
}

export const ArchEdge = memo(function ArchEdge(props: EdgeProps) {
  const { sourceX, sourceY, targetX, targetY, markerEnd, style } = props;
  return <BaseEdge path={archPath(sourceX, sourceY, targetX, targetY)} markerEnd={markerEnd} style={style} />;
});
