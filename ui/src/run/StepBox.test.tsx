import { render, screen } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import type { GraphNode, RunGraph } from "../api/types";
import { STATUS_COLOURS } from "../status";
import { toFlow } from "./RunGraph";
import { StepBox } from "./StepBox";
import { layout } from "./layout";

function node(id: string, status: string, extra: Partial<GraphNode> = {}): GraphNode {
  return { id, desc: null, kind: "python", tasks: 1, loop: false, status, runs: 1, iterations: null, ...extra };
}

// the browser normalises colours to rgb()
function rgb(hex: string): string {
  const n = parseInt(hex.slice(1), 16);
  return `rgb(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255})`;
}

describe("StepBox", () => {
  it.each(["PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED", "AWAITING_APPROVAL"])(
    "colours a %s step by its status",
    (status) => {
      render(<StepBox node={node("fetch", status)} />);
      const box = screen.getByTestId("step-fetch");
      expect(box.dataset.status).toBe(status);
      expect(box.style.borderColor).toBe(rgb(STATUS_COLOURS[status]));
      expect(box.textContent).toContain(status);
    },
  );

  it("shows a loop step's done / running / failed counts on one node", () => {
    const it_ = { total: 100_000, done: 41_000, running: 10, failed: 3 };
    render(<StepBox node={node("each", "RUNNING", { loop: true, iterations: it_ })} />);
    const counts = screen.getByTestId("iterations-each");
    expect(counts.textContent).toContain("41000 done");
    expect(counts.textContent).toContain("10 running");
    expect(counts.textContent).toContain("3 failed");
    expect(counts.textContent).toContain("/ 100000");
    expect(screen.getAllByTestId(/^step-/)).toHaveLength(1);
  });

  it("marks a teardown step, with the status it ended with", () => {
    render(<StepBox node={node("cleanup", "FAILED", { teardown: true })} />);
    const box = screen.getByTestId("step-cleanup");
    expect(box.textContent).toContain("teardown");
    expect(box.dataset.status).toBe("FAILED");
    render(<StepBox node={node("plain", "COMPLETED")} />);
    expect(screen.getByTestId("step-plain").textContent).not.toContain("teardown");
  });

  it("says what holds a step back: a retry timer with its attempt and error", () => {
    const wait = {
      kind: "retry", step: "flaky", index: null, due_at: new Date(Date.now() + 90_500).toISOString(), attempt: 2,
      attempts: 3, error: { message: "ValueError: boom" }, task: null, worker: null, pool: null, approval_id: null,
      command_id: null, undoes: null, count: 1,
    };
    render(<StepBox node={node("flaky", "RUNNING", { wait })} />);
    const shown = screen.getByTestId("wait-flaky");
    expect(shown.textContent).toMatch(/^retrying in 1m 30s, attempt 2 of 3$/);
    expect(shown.title).toMatch(/^retrying in 1m 30s, attempt 2 of 3, after: ValueError: boom$/);
  });

  it("shows no wait for work under way", () => {
    const wait = {
      kind: "claimed", step: "one", index: null, due_at: null, attempt: 1, attempts: null, error: null, task: null,
      worker: "w-1", pool: "default", approval_id: null, command_id: "5", undoes: null, count: 1,
    };
    render(<StepBox node={node("one", "RUNNING", { wait })} />);
    expect(screen.queryByTestId("wait-one")).toBeNull();
  });

  it("shows no counts on a step without a loop", () => {
    render(<StepBox node={node("one", "COMPLETED")} />);
    expect(screen.queryByTestId("iterations-one")).toBeNull();
  });
});

describe("the graph", () => {
  const graph: RunGraph = {
    execution_id: "1",
    status: "RUNNING",
    entry_step: "start",
    nodes: [
      node("start", "COMPLETED"),
      node("each", "RUNNING", { loop: true, iterations: { total: 5, done: 2, running: 1, failed: 0 } }),
      node("end", "PENDING"),
    ],
    edges: [
      { id: "start->each#0", source: "start", target: "each", kind: "next", conditional: false },
      { id: "each->end#0", source: "each", target: "end", kind: "next", conditional: false },
    ],
  };

  it("lays steps out left to right with elkjs, one node per step", async () => {
    const positions = await layout(graph.nodes, graph.edges);
    expect(Object.keys(positions).sort()).toEqual(["each", "end", "start"]);
    expect(positions.start.x).toBeLessThan(positions.each.x);
    expect(positions.each.x).toBeLessThan(positions.end.x);
    const flow = toFlow(graph, positions);
    expect(flow.nodes.map((n) => n.data.step.status)).toEqual(["COMPLETED", "RUNNING", "PENDING"]);
    expect(flow.edges.find((e) => e.source === "each")?.animated).toBe(true);
  });

  it("keeps a step that did not change as the same node on a live update (drawn again only if it did)", async () => {
    const positions = await layout(graph.nodes, graph.edges);
    const first = toFlow(graph, positions);
    const later: RunGraph = {
      ...graph,
      nodes: [graph.nodes[0], node("each", "COMPLETED", { loop: true, iterations: { total: 5, done: 5, running: 0, failed: 0 } }), node("end", "PENDING")],
    };
    const next = toFlow(later, positions, first);
    expect(next.nodes[0]).toBe(first.nodes[0]);
    expect(next.nodes[2]).toBe(first.nodes[2]); // an equal step in a new object: still the same node
    expect(next.nodes[1]).not.toBe(first.nodes[1]);
    expect(next.nodes[1].data.step.status).toBe("COMPLETED");
    expect(next.edges[0]).toBe(first.edges[0]);
    expect(next.edges[1]).not.toBe(first.edges[1]); // "each" no longer running: not animated
    expect(next.edges[1].animated).toBe(false);
    // its size given, not measured in the page: React Flow knows which nodes are in view
    expect(next.nodes[1].measured).toEqual({ width: 200, height: 64 });
  });
});
