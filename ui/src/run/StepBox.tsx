import type { GraphNode, Wait } from "../api/types";
import { statusColour } from "../status";
import { blocking, useNow, waitText } from "../waits";

/** A step as the graph draws it: its name, kind and status colour; a loop step shows its
 * iterations done / running / failed (one node, whatever the number of iterations); a
 * teardown step says it is one (no arc leads to it: it runs as the run ends); a step held
 * back (a retry timer, an approval) says so and until when. */
export function StepBox({ node }: { node: GraphNode }) {
  const colour = statusColour(node.status);
  const it = node.iterations;
  return (
    <div
      className="step"
      data-testid={`step-${node.id}`}
      data-status={node.status}
      style={{ borderColor: colour, background: `${colour}22` }}
      title={node.desc ?? undefined}
    >
      <div className="step-name">
        <span className="dot" style={{ background: colour }} />
        {node.id}
        {node.loop && <span className="loop-flag" title="loop">⟳</span>}
        {node.teardown && (
          <span className="teardown-flag" title="teardown: runs once as the run ends, whatever the end">
            teardown
          </span>
        )}
      </div>
      <div className="step-meta">
        <span>{node.kind}</span>
        <span className="step-status">{node.status}</span>
      </div>
      {node.wait && blocking(node.wait) && <StepWait id={node.id} wait={node.wait} />}
      {it && (
        <div className="iterations" data-testid={`iterations-${node.id}`}>
          <span className="done">{it.done} done</span>
          <span className="running">{it.running} running</span>
          <span className="failed">{it.failed} failed</span>
          <span className="total">/ {it.total}</span>
        </div>
      )}
    </div>
  );
}

function StepWait({ id, wait }: { id: string; wait: Wait }) {
  const now = useNow();
  return (
    <div className="step-wait" data-testid={`wait-${id}`} data-kind={wait.kind} title={waitText(wait, now)}>
      {waitText(wait, now, false)}
    </div>
  );
}
