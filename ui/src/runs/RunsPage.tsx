import { keepPreviousData, useQuery } from "@tanstack/react-query";
import { FormEvent, useState } from "react";
import { api, ApiError, query } from "../api/client";
import type { ExecutionItem, ExecutionList } from "../api/types";
import { duration, when } from "../format";
import { useLive } from "../live";
import { href, navigate } from "../router";
import { statusColour } from "../status";

const PAGE = 50;
const STATUSES = ["", "RUNNING", "COMPLETED", "FAILED", "CANCELLED"];
const SINCE: Record<string, number> = { "": 0, "1h": 3600, "24h": 86400, "7d": 7 * 86400 };

export interface RunsFilter {
  status: string;
  path: string;
  since: string;
  page: number;
}

export function runsUrl(f: RunsFilter, now = Date.now()): string {
  const since = SINCE[f.since] ? new Date(now - SINCE[f.since] * 1000).toISOString() : undefined;
  return `/api/executions${query({ status: f.status, path: f.path.trim(), since, limit: PAGE, offset: f.page * PAGE })}`;
}

/** Runs: server-side pages of GET /api/executions, filtered by status, playbook and start. */
export function RunsPage() {
  const [filter, setFilter] = useState<RunsFilter>({ status: "", path: "", since: "", page: 0 });
  const set = (patch: Partial<RunsFilter>) => setFilter((f) => ({ ...f, page: 0, ...patch }));
  const runs = useQuery({
    queryKey: ["executions", filter],
    queryFn: () => api<ExecutionList>(runsUrl(filter)),
    placeholderData: keepPreviousData,
  });
  useLive((after) => `/api/executions/stream${query({ after })}`, [["executions"]]);
  const items = runs.data?.items ?? [];

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
          <input
            name="playbook"
            value={filter.path}
            placeholder="catalog path"
            onChange={(e) => set({ path: e.target.value })}
          />
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
      {runs.error && <p className="error">{String((runs.error as Error).message)}</p>}
      <table className="list">
        <thead>
          <tr>
            <th>Id</th>
            <th>Status</th>
            <th>Playbook</th>
            <th>Version</th>
            <th>Started</th>
            <th>Duration</th>
          </tr>
        </thead>
        <tbody>
          {items.map((r) => (
            <RunRow key={r.execution_id} run={r} />
          ))}
          {!runs.isLoading && items.length === 0 && (
            <tr>
              <td colSpan={6} className="empty">
                No runs match.
              </td>
            </tr>
          )}
        </tbody>
      </table>
      <div className="pager">
        <button disabled={filter.page === 0} onClick={() => setFilter((f) => ({ ...f, page: f.page - 1 }))}>
          Previous
        </button>
        <span>page {filter.page + 1}</span>
        <button
          disabled={items.length < PAGE}
          onClick={() => setFilter((f) => ({ ...f, page: f.page + 1 }))}
        >
          Next
        </button>
      </div>
    </section>
  );
}

function RunRow({ run }: { run: ExecutionItem }) {
  const to = { page: "run" as const, id: run.execution_id };
  return (
    <tr data-testid="run-row" data-status={run.status}>
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
      </td>
      <td>{run.path}</td>
      <td>{run.version ?? "–"}</td>
      <td>{when(run.created_at)}</td>
      <td>{duration(run.duration_s, run.ended_at ? null : run.created_at)}</td>
    </tr>
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
