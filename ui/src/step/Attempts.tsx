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
          </tr>
        </thead>
        {attempts.map((a) => (
          // one body per attempt: its times on a line, its idempotency key in full below
          <tbody key={a.command_id} data-testid="attempt-row" data-status={a.status}>
            <tr>
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
              <td title={when(a.started_at)}>{clock(a.started_at)}</td>
              <td title={when(a.ended_at)}>{clock(a.ended_at)}</td>
              <td>{a.duration_s === null ? "–" : duration(a.duration_s)}</td>
            </tr>
            <tr className="attempt-key">
              <td />
              <td colSpan={5} className="mono">
                key {a.idempotency_key ?? "–"}
              </td>
            </tr>
          </tbody>
        ))}
      </table>
    </>
  );
}

/** The time of day with milliseconds (UTC, as the timeline shows it); the date on hover. */
function clock(iso: string | null): string {
  return iso ? iso.slice(11, 23) : "–";
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
