import {
  Background,
  Controls,
  Handle,
  MarkerType,
  Position,
  ReactFlow,
  type Edge,
  type Node,
  type NodeProps,
} from "@xyflow/react";
import { useEffect, useMemo, useState } from "react";
import type { GraphNode, RunGraph as Graph } from "../api/types";
import { layout, NODE_H, NODE_W, type Positions, shapeKey } from "./layout";
import { StepBox } from "./StepBox";

type StepNode = Node<{ step: GraphNode }, "step">;

function StepNodeView({ data }: NodeProps<StepNode>) {
  return (
    <>
      <Handle type="target" position={Position.Left} />
      <StepBox node={data.step} />
      <Handle type="source" position={Position.Right} />
    </>
  );
}

const nodeTypes = { step: StepNodeView };

export function toFlow(graph: Graph, positions: Positions): { nodes: StepNode[]; edges: Edge[] } {
  const nodes: StepNode[] = graph.nodes.map((n) => ({
    id: n.id,
    type: "step",
    position: positions[n.id] ?? { x: 0, y: 0 },
    data: { step: n },
    width: NODE_W,
    height: NODE_H,
    draggable: false,
    connectable: false,
  }));
  const edges: Edge[] = graph.edges.map((e) => ({
    id: e.id,
    source: e.source,
    target: e.target,
    animated: graph.nodes.find((n) => n.id === e.source)?.status === "RUNNING",
    style: e.kind === "compensation" ? { strokeDasharray: "6 4" } : undefined,
    markerEnd: { type: MarkerType.ArrowClosed },
  }));
  return { nodes, edges };
}

/** The playbook's graph, laid out by elkjs, each step coloured by its status. */
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
  const flow = useMemo(() => (positions ? toFlow(graph, positions) : null), [graph, positions]);
  if (!flow) return <div className="graph loading">laying out…</div>;
  return (
    <div className="graph" data-testid="graph">
      <ReactFlow
        nodes={flow.nodes}
        edges={flow.edges}
        nodeTypes={nodeTypes}
        fitView
        nodesDraggable={false}
        nodesConnectable={false}
        onNodeClick={(_, node) => onStep?.(node.id)}
        proOptions={{ hideAttribution: true }}
        minZoom={0.05}
      >
        <Background />
        <Controls showInteractive={false} />
      </ReactFlow>
    </div>
  );
}
