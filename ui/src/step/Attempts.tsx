import { duration, when } from "../format";
import { statusColour } from "../status";
import { RunLink } from "./RunLink";
import type { Attempt } from "./types";

/** A step's attempts, the latest last (the describe lists the last 50 of `total`). */
export function Attempts({ attempts, total }: { attempts: Attempt[]; total: number }) {
  if (!attempts.length) return <p className="muted">no attempt yet</p>;
  return (
    <>
      {total > attempts.length && (
        <p className="muted">the last {attempts.length} of {total.toLocaleString()} attempts</p>
      )}
      <table className="attempts" data-testid="attempts">
        <thead>
          <tr>
            <th>#</th>
            <th>status</th>
            <th>worker</th>
            <th>started</th>
            <th>ended</th>
            <th>took</th>
            <th>idempotency key</th>
          </tr>
        </thead>
        <tbody>
          {attempts.map((a) => (
            <tr key={a.command_id} data-testid="attempt-row" data-status={a.status}>
              <td>
                {a.attempt ?? "–"}
                {a.index !== null && a.index >= 0 && <span className="muted"> [{a.index}]</span>}
              </td>
              <td>
                <span className="badge" style={{ background: statusColour(a.status) }}>
                  {a.status}
                </span>
              </td>
              <td>{a.worker ?? "–"}</td>
              <td>{when(a.started_at)}</td>
              <td>{when(a.ended_at)}</td>
              <td>{a.duration_s === null ? "–" : duration(a.duration_s)}</td>
              <td className="mono">{a.idempotency_key ?? "–"}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </>
  );
}

/** The runs a `playbook` step's attempts started. */
export function ChildRuns({ attempts }: { attempts: Attempt[] }) {
  const ids = [...new Set(attempts.map((a) => a.child_execution_id).filter((x): x is string => !!x))];
  if (!ids.length) return null;
  return (
    <p data-testid="child-runs">
      Child run{ids.length > 1 ? "s" : ""}:{" "}
      {ids.map((x, i) => (
        <span key={x}>
          {i > 0 && ", "}
          <RunLink id={x} testid={`child-${x}`} />
        </span>
      ))}
    </p>
  );
}
