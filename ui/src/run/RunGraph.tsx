import {
  Background,
  Controls,
  Handle,
  MarkerType,
  Position,
  ReactFlow,
  type Edge,
  type FitViewOptions,
  type Node,
  type NodeProps,
  useReactFlow,
  useStore,
} from "@xyflow/react";
import { memo, useEffect, useMemo, useRef, useState } from "react";
import type { GraphNode, RunGraph as Graph } from "../api/types";
import { ArchEdge, arched } from "./arches";
import { layout, NODE_H, NODE_W, type Positions, shapeKey } from "./layout";
import { StepBox } from "./StepBox";
import { firstView } from "./viewport";

type StepNode = Node<{ step: GraphNode }, "step">;

// a node is drawn again only when its step changed (toFlow keeps the same data otherwise)
const StepNodeView = memo(function StepNodeView({ data }: NodeProps<StepNode>) {
  return (
    <>
      <Handle type="target" position={Position.Left} />
      <StepBox node={data.step} />
      <Handle type="source" position={Position.Right} />
    </>
  );
});

const nodeTypes = { step: StepNodeView };
const edgeTypes = { arch: ArchEdge };

/** A graph shown whole is fitted again when its pane changes size (the step panel opening
 * beside it): fitted once, its right-hand steps would be cut off, and out of the page. */
function RefitWhenResized({ options }: { options: FitViewOptions }) {
  const { fitView } = useReactFlow();
  const width = useStore((s) => s.width);
  const height = useStore((s) => s.height);
  const first = useRef(true);
  useEffect(() => {
    if (first.current) {
      first.current = false; // the first fit is React Flow's own (`fitView`)
      return;
    }
    void fitView(options);
  }, [width, height, fitView, options]);
  return null;
}

const stepKey = (n: GraphNode) => JSON.stringify(n);

/** React Flow's nodes and edges for a graph; `previous` (the last call's answer): a node or
 * edge that did not change is the same object, so a live update on a 500-step graph
 * re-draws the steps that moved on, not all 500. */
export function toFlow(
  graph: Graph,
  positions: Positions,
  previous?: { nodes: StepNode[]; edges: Edge[] },
): { nodes: StepNode[]; edges: Edge[] } {
  const before = new Map(previous?.nodes.map((n) => [n.id, n]));
  const nodes: StepNode[] = graph.nodes.map((n) => {
    const position = positions[n.id] ?? { x: 0, y: 0 };
    const old = before.get(n.id);
    if (old && old.position === position && stepKey(old.data.step) === stepKey(n)) return old;
    return {
      id: n.id,
      type: "step",
      position,
      data: { step: n },
      width: NODE_W,
      height: NODE_H,
      // the size is known: React Flow need not measure a node in the page before it fits
      // the view or knows which nodes are in it
      measured: { width: NODE_W, height: NODE_H },
      draggable: false,
      connectable: false,
    };
  });
  const status = new Map(graph.nodes.map((n) => [n.id, n.status]));
  const edgesBefore = new Map(previous?.edges.map((e) => [e.id, e]));
  const edges: Edge[] = graph.edges.map((e) => {
    const animated = status.get(e.source) === "RUNNING";
    const [from, to] = [positions[e.source], positions[e.target]];
    const type = from && to && arched(from, to) ? "arch" : undefined;
    const old = edgesBefore.get(e.id);
    if (old && old.animated === animated && old.type === type && old.source === e.source && old.target === e.target) {
      return old;
    }
    return {
      id: e.id,
      source: e.source,
      target: e.target,
      type,
      animated,
      style: e.kind === "compensation" ? { strokeDasharray: "6 4" } : undefined,
      markerEnd: { type: MarkerType.ArrowClosed },
    };
  });
  return { nodes, edges };
}

/** The playbook's graph, laid out by elkjs, each step coloured by its status. Only the
 * steps in view are in the page (a 500-step playbook draws the few on screen), and a big
 * graph opens on its entry step. */
export function RunGraph({ graph, onStep }: { graph: Graph; onStep?: (step: string) => void }) {
  const [positions, setPositions] = useState<Positions | null>(null);
  const key = shapeKey(graph.nodes, graph.edges);
  useEffect(() => {
    let live = true;
    layout(graph.nodes, graph.edges).then((p) => live && setPositions(p));
    return () => {
      live = false;
    };
    // laid out again only when the shape changes
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [key]);
  const last = useRef<{ nodes: StepNode[]; edges: Edge[] } | undefined>(undefined);
  const flow = useMemo(() => {
    if (!positions) return null;
    last.current = toFlow(graph, positions, last.current);
    return last.current;
  }, [graph, positions]);
  // the first view only, from the first positions (React Flow reads it once)
  const fit = useRef<FitViewOptions | null>(null);
  if (positions && !fit.current) {
    const ids = firstView(positions, graph.entry_step);
    fit.current = ids ? { nodes: ids.map((id) => ({ id })), maxZoom: 1 } : {};
  }
  if (!flow) return <div className="graph loading">laying out…</div>;
  return (
    <div className="graph" data-testid="graph">
      <ReactFlow
        nodes={flow.nodes}
        edges={flow.edges}
        nodeTypes={nodeTypes}
        edgeTypes={edgeTypes}
        fitView
        fitViewOptions={fit.current ?? undefined}
        onlyRenderVisibleElements
        nodesDraggable={false}
        nodesConnectable={false}
        onNodeClick={(_, node) => onStep?.(node.id)}
        proOptions={{ hideAttribution: true }}
        minZoom={0.05}
      >
        <Background />
        <Controls showInteractive={false} />
        {fit.current && !fit.current.nodes && <RefitWhenResized options={fit.current} />}
      </ReactFlow>
    </div>
  );
}
