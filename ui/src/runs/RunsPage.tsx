import { keepPreviousData, useQuery, useQueryClient } from "@tanstack/react-query";
import { FormEvent, useEffect, useState } from "react";
import { api, ApiError, query } from "../api/client";
import type { ExecutionItem, ExecutionList, Whoami } from "../api/types";
import { duration, when } from "../format";
import { href, navigate } from "../router";
import { statusColour } from "../status";
import { blocking, useNow, waitText, waitWhere } from "../waits";
import { BulkActions } from "./BulkActions";
import { applyChange, RunsFilter, SINCE_S } from "./changes";
import { followRuns } from "./runsStream";

export type { RunsFilter } from "./changes";

const PAGE = 50;
const STATUSES = ["", "RUNNING", "COMPLETED", "FAILED", "CANCELLED"];

/** The list route of one page: the filters and the keyset `cursor` of the page (the
 * previous page's `next`; none for the first). */
export function runsUrl(f: RunsFilter, cursor: string | null = null, now = Date.now()): string {
  const since = SINCE_S[f.since] ? new Date(now - SINCE_S[f.since] * 1000).toISOString() : undefined;
  return `/api/executions${query({ status: f.status, path: f.path.trim(), since, limit: PAGE, cursor })}`;
}

/** Runs: keyset pages of GET /api/executions, filtered by status, playbook and start, kept
 * live by GET /api/executions/stream (rows changed in place), with bulk cancel / re-run. */
export function RunsPage({ who }: { who: Whoami }) {
  const [filter, setFilter] = useState<RunsFilter>({ status: "", path: "", since: "" });
  // the cursors of the pages seen: cursors[i] reads page i (Previous pops one)
  const [cursors, setCursors] = useState<(string | null)[]>([null]);
  const [selected, setSelected] = useState<Record<string, ExecutionItem>>({});
  const set = (patch: Partial<RunsFilter>) => {
    setFilter((f) => ({ ...f, ...patch }));
    setCursors([null]);
    setSelected({});
  };
  const cursor = cursors[cursors.length - 1];
  const key = ["executions", filter, cursor];
  const client = useQueryClient();
  const runs = useQuery({
    queryKey: key,
    queryFn: () => api<ExecutionList>(runsUrl(filter, cursor)),
    placeholderData: keepPreviousData,
  });
  const firstPage = cursors.length === 1;
  useEffect(
    () =>
      followRuns(
        (run) => {
          client.setQueryData<ExecutionList>(key, (page) => page && applyChange(page, run, filter, firstPage));
          setSelected((s) => (s[run.execution_id] ? { ...s, [run.execution_id]: run } : s));
        },
        () => void client.invalidateQueries({ queryKey: ["executions"] }),
      ),
    // eslint-disable-next-line react-hooks/exhaustive-deps
    [JSON.stringify(key), client],
  );
  const items = runs.data?.items ?? [];
  const selectable = who.may.cancel || who.may.act;
  const toggle = (run: ExecutionItem) =>
    setSelected((s) => {
      const next = { ...s };
      if (next[run.execution_id]) delete next[run.execution_id];
      else next[run.execution_id] = run;
      return next;
    });

  return (
    <section className="runs">
      <h2>Runs</h2>
      <div className="filters">
        <label>
          Status
          <select name="status" value={filter.status} onChange={(e) => set({ status: e.target.value })}>
            {STATUSES.map((s) => (
              <option key={s} value={s}>
                {s || "any"}
              </option>
            ))}
          </select>
        </label>
        <label>
          Playbook
          <input name="playbook" value={filter.path} placeholder="catalog path" onChange={(e) => set({ path: e.target.value })} />
        </label>
        <label>
          Started
          <select name="since" value={filter.since} onChange={(e) => set({ since: e.target.value })}>
            <option value="">any time</option>
            <option value="1h">last hour</option>
            <option value="24h">last 24 h</option>
            <option value="7d">last 7 days</option>
          </select>
        </label>
        <SearchById />
      </div>
      {selectable && (
        <BulkActions
          selected={Object.values(selected)}
          who={who}
          onDone={() => void client.invalidateQueries({ queryKey: ["executions"] })}
        />
      )}
      {runs.error && <p className="error">{String((runs.error as Error).message)}</p>}
      <table className="list">
        <thead>
          <tr>
            {selectable && <th aria-label="select" />}
            <th>Id</th>
            <th>Status</th>
            <th>Playbook</th>
            <th>Version</th>
            <th>Started by</th>
            <th>Started</th>
            <th>Duration</th>
            <th>Progress</th>
          </tr>
        </thead>
        <tbody>
          {items.map((r) => (
            <RunRow
              key={r.execution_id}
              run={r}
              selectable={selectable}
              checked={!!selected[r.execution_id]}
              onToggle={() => toggle(r)}
            />
          ))}
          {!runs.isLoading && items.length === 0 && (
            <tr>
              <td colSpan={selectable ? 9 : 8} className="empty">
                No runs match.
              </td>
            </tr>
          )}
        </tbody>
      </table>
      <div className="pager">
        <button disabled={firstPage} onClick={() => setCursors((c) => c.slice(0, -1))}>
          Previous
        </button>
        <span>page {cursors.length}</span>
        <button
          disabled={!runs.data?.next}
          onClick={() => runs.data?.next && setCursors((c) => [...c, runs.data.next as string])}
        >
          Next
        </button>
      </div>
    </section>
  );
}

function Progress({ run }: { run: ExecutionItem }) {
  const done = run.steps_done ?? 0;
  const total = run.steps_total;
  if (!total) return <>–</>;
  return (
    <span className="progress" title={`${done} of ${total} steps done`}>
      <progress max={total} value={Math.min(done, total)} /> {done}/{total}
    </span>
  );
}

function RunRow({
  run,
  selectable,
  checked,
  onToggle,
}: {
  run: ExecutionItem;
  selectable: boolean;
  checked: boolean;
  onToggle: () => void;
}) {
  const to = { page: "run" as const, id: run.execution_id };
  return (
    <tr data-testid="run-row" data-id={run.execution_id} data-status={run.status}>
      {selectable && (
        <td>
          <input type="checkbox" aria-label={`select ${run.execution_id}`} checked={checked} onChange={onToggle} />
        </td>
      )}
      <td>
        <a
          href={href(to)}
          onClick={(e) => {
            e.preventDefault();
            navigate(to);
          }}
        >
          {run.execution_id}
        </a>
      </td>
      <td>
        <span className="badge" style={{ background: statusColour(run.status) }}>
          {run.status}
        </span>
        {run.waiting && blocking(run.waiting) && <RowWait run={run} />}
      </td>
      <td>{run.path}</td>
      <td>{run.version ?? "–"}</td>
      <td>{run.started_by ?? "–"}</td>
      <td>{when(run.created_at)}</td>
      <td>{duration(run.duration_s, run.ended_at ? null : run.created_at)}</td>
      <td>
        <Progress run={run} />
      </td>
    </tr>
  );
}

/** What a running run waits on first (a retry timer, an approval, a cancel's grace). */
function RowWait({ run }: { run: ExecutionItem }) {
  const now = useNow();
  const w = run.waiting;
  if (!w) return null;
  return (
    <div className="row-wait" data-testid="run-waiting" data-kind={w.kind}>
      {waitWhere(w)}
      {waitText(w, now)}
    </div>
  );
}

function SearchById() {
  const [id, setId] = useState("");
  const [error, setError] = useState<string | null>(null);
  async function go(e: FormEvent) {
    e.preventDefault();
    const wanted = id.trim();
    if (!/^[0-9]+$/.test(wanted)) return setError("an id is digits");
    try {
      await api(`/api/executions/${wanted}/status`);
      navigate({ page: "run", id: wanted });
    } catch (err) {
      setError(err instanceof ApiError && err.status === 404 ? `no run ${wanted}` : String(err));
    }
  }
  return (
    <form className="search" onSubmit={go}>
      <input name="run-id" value={id} placeholder="run id" onChange={(e) => { setId(e.target.value); setError(null); }} />
      <button type="submit">Open</button>
      {error && <span className="error">{error}</span>}
    </form>
  );
}
