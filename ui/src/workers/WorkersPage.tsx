import { useQuery } from "@tanstack/react-query";
import { api } from "../api/client";
import { RunLink } from "../approvals/ApprovalCard";
import { when } from "../format";
import type { WorkerList } from "./types";

// The registry changes on check-ins (every third of a worker's ttl): polled, no stream.
const POLL_MS = 5000;
const STATUS_COLOURS = { live: "#27ae60", lost: "#d64545" };

/** Workers: who is live or lost, where, what each runs; and the pools with queued
 * commands that no live worker serves. */
export function WorkersPage() {
  const list = useQuery({
    queryKey: ["workers"],
    queryFn: () => api<WorkerList>("/api/workers"),
    refetchInterval: POLL_MS,
  });
  if (list.error) return <p className="error">{(list.error as Error).message}</p>;
  const items = list.data?.items ?? [];
  const missing = list.data?.without_worker ?? [];
  return (
    <section className="workers">
      <h2>Workers</h2>
      {missing.length > 0 && (
        <div className="warning-box" data-testid="without-worker">
          <h3>Pools with queued commands and no live worker</h3>
          <ul>
            {missing.map((m) => (
              <li key={m.pool} data-testid="pool-without-worker" data-pool={m.pool}>
                <strong>{m.pool}</strong>: {m.commands} queued command(s) of step(s) {m.steps.join(", ")} ({m.message})
              </li>
            ))}
          </ul>
        </div>
      )}
      <table className="list">
        <thead>
          <tr>
            <th>Name</th><th>Status</th><th>Pools</th><th>Host</th><th>Pid</th><th>Version</th><th>Started</th><th>Last seen</th><th>Running</th>
          </tr>
        </thead>
        <tbody>
          {items.map((w) => (
            <tr key={w.worker_key} data-testid="worker-row" data-status={w.status} data-name={w.name}>
              <td>{w.name}{w.kind === "embedded" && <span className="muted"> (embedded)</span>}</td>
              <td><span className="badge" style={{ background: STATUS_COLOURS[w.status] }}>{w.status}</span></td>
              <td>{w.pools.join(", ")}</td>
              <td>{w.host || "–"}</td>
              <td>{w.pid ?? "–"}</td>
              <td>{w.version || "–"}</td>
              <td>{when(w.started_at)}</td>
              <td>{when(w.last_seen)}</td>
              <td data-testid="running">
                {w.running.length === 0 ? "idle" : w.running.map((c) => (
                  <div key={c.command_id}>
                    <code>{c.step}</code> of <RunLink id={c.execution_id} />
                  </div>
                ))}
              </td>
            </tr>
          ))}
          {list.data && items.length === 0 && (
            <tr><td colSpan={9} className="empty">No worker has checked in.</td></tr>
          )}
        </tbody>
      </table>
    </section>
  );
}
