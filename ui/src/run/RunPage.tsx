import { useQuery, useQueryClient } from "@tanstack/react-query";
import { useEffect, useState } from "react";
import { api, query } from "../api/client";
import { follow } from "../api/stream";
import type { ExecutionOut, RunGraph as Graph, Whoami } from "../api/types";
import { duration, when } from "../format";
import { statusColour, TERMINAL } from "../status";
import { RunGraph } from "./RunGraph";
import { Timeline } from "./Timeline";
import { useEvents } from "./useEvents";

/** One run: its graph coloured live, its events, and the actions the role allows. */
export function RunPage({ id, who }: { id: string; who: Whoami }) {
  const client = useQueryClient();
  const run = useQuery({
    queryKey: ["run", id, "execution"],
    queryFn: () => api<ExecutionOut>(`/api/executions/${id}${query({ events_limit: 0 })}`),
  });
  const graph = useQuery({
    queryKey: ["run", id, "graph"],
    queryFn: () => api<Graph>(`/api/executions/${id}/graph`),
  });
  const { events, pull } = useEvents(id);
  const status = run.data?.status;
  const ended = status !== undefined && TERMINAL.has(status);

  useEffect(() => {
    if (ended) return; // an ended run does not change: nothing to follow
    return follow(
      (after) => `/api/executions/${id}/stream${query({ after })}`,
      () => {
        void client.invalidateQueries({ queryKey: ["run", id] });
        pull();
      },
    );
  }, [id, ended, client, pull]);

  if (run.error) return <p className="error">{(run.error as Error).message}</p>;
  if (!run.data) return <p>Loading run {id}…</p>;
  const r = run.data;
  return (
    <section className="run">
      <div className="run-head">
        <h2>
          Run {r.execution_id} <span className="badge" data-testid="run-status" style={{ background: statusColour(r.status) }}>{r.status}</span>
        </h2>
        <dl>
          <dt>Playbook</dt>
          <dd>
            {r.path}
            {r.version !== null && ` v${r.version}`}
          </dd>
          <dt>Started</dt>
          <dd>{when(r.created_at)}</dd>
          <dt>Duration</dt>
          <dd>{duration(r.duration_s, r.ended_at ? null : r.created_at)}</dd>
        </dl>
        {who.may.cancel && !ended && <CancelButton id={id} />}
      </div>
      {r.error && <pre className="error">{JSON.stringify(r.error, null, 2)}</pre>}
      {graph.data ? <RunGraph graph={graph.data} /> : <div className="graph loading">loading graph…</div>}
      <Timeline events={events} />
    </section>
  );
}

function CancelButton({ id }: { id: string }) {
  const client = useQueryClient();
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  async function cancel() {
    if (!window.confirm(`Cancel run ${id}?`)) return;
    setBusy(true);
    try {
      await api(`/api/executions/${id}/cancel`, { method: "POST", body: "{}" });
      await client.invalidateQueries({ queryKey: ["run", id] });
    } catch (e) {
      setError((e as Error).message);
    } finally {
      setBusy(false);
    }
  }
  return (
    <div className="actions">
      <button className="danger" data-testid="cancel" disabled={busy} onClick={cancel}>
        Cancel run
      </button>
      {error && <span className="error">{error}</span>}
    </div>
  );
}
