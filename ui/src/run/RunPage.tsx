import { useQuery, useQueryClient } from "@tanstack/react-query";
import { useEffect, useRef, useState } from "react";
import { api, query } from "../api/client";
import { follow } from "../api/stream";
import type { Whoami } from "../api/types";
import { duration, when } from "../format";
import { statusColour, TERMINAL } from "../status";
import { RunLink } from "../step/RunLink";
import { StepPanel } from "../step/StepPanel";
import { DiagnosisBanner } from "./DiagnosisBanner";
import { RunGraph } from "./RunGraph";
import { Timeline } from "./Timeline";
import { WaitBanner } from "./WaitBanner";
import { graphQuery, runQuery } from "./queries";
import { useEvents } from "./useEvents";

/** One run: its graph coloured live, its events, and the actions the role allows. */
export function RunPage({ id, who }: { id: string; who: Whoami }) {
  const client = useQueryClient();
  const run = useQuery(runQuery(id));
  const graph = useQuery(graphQuery(id));
  const { events, pull } = useEvents(id);
  const [selected, setSelected] = useState<string | null>(null);
  useEffect(() => setSelected(null), [id]); // another run: its steps are not this one's
  const status = run.data?.status;
  const ended = status !== undefined && TERMINAL.has(status);
  // the stream starts where the first read of the run ended: only what comes next
  const from = useRef<{ id: string; seq: number } | null>(null);
  if (run.data && from.current?.id !== id) from.current = { id, seq: run.data.last_seq ?? 0 };
  const known = run.data !== undefined;

  useEffect(() => {
    // not before the run is read (an ended run does not change: nothing to follow)
    if (!known || ended) return;
    return follow(
      (after) => `/api/executions/${id}/stream${query({ after })}`,
      () => {
        void client.invalidateQueries({ queryKey: ["run", id] });
        pull();
      },
      { after: from.current?.seq ?? 0 },
    );
  }, [id, known, ended, client, pull]);

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
          {r.parent_execution_id && (
            <>
              <dt>Parent run</dt>
              <dd>
                <RunLink id={r.parent_execution_id} testid="parent-run" />
              </dd>
            </>
          )}
        </dl>
        {who.may.cancel && !ended && <CancelButton id={id} />}
      </div>
      {!ended && <WaitBanner waits={r.waits} />}
      <DiagnosisBanner id={id} status={r.status} />
      {r.error && <pre className="error">{JSON.stringify(r.error, null, 2)}</pre>}
      <div className="run-body">
        <div className="run-main">
          {graph.data ? (
            <RunGraph graph={graph.data} onStep={setSelected} />
          ) : (
            <div className="graph loading">loading graph…</div>
          )}
          <Timeline events={events} onStep={setSelected} />
        </div>
        {selected && <StepPanel id={id} step={selected} who={who} onClose={() => setSelected(null)} />}
      </div>
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
