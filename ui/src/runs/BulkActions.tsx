import { useState } from "react";
import { api, ApiError } from "../api/client";
import type { ExecutionItem, Whoami } from "../api/types";

/** One run's answer to a bulk action: ok, or the server's refusal (a 409 for a run
 * already ended is one of them, shown beside the others, not an error of the batch). */
export interface BulkResult {
  id: string;
  ok: boolean;
  text: string;
}

const RETRYABLE = new Set(["FAILED", "CANCELLED"]);

async function each(ids: string[], act: (id: string) => Promise<string>): Promise<BulkResult[]> {
  // one request per run, all at once: a slow or refused one does not hold up the others
  return Promise.all(
    ids.map((id) =>
      act(id).then(
        (text) => ({ id, ok: true, text }),
        (err: unknown) => ({
          id,
          ok: false,
          text: err instanceof ApiError ? `${err.status} ${err.code}: ${err.message}` : String(err),
        }),
      ),
    ),
  );
}

/** Cancel or re-run the selected runs, for the roles that may (GET /api/whoami's `may`). */
export function BulkActions({
  selected,
  who,
  onDone,
}: {
  selected: ExecutionItem[];
  who: Whoami;
  onDone: () => void;
}) {
  const [results, setResults] = useState<BulkResult[]>([]);
  const [busy, setBusy] = useState(false);
  if (!who.may.cancel && !who.may.act) return null;
  const retryable = selected.filter((r) => RETRYABLE.has(r.status));
  async function run(ids: string[], act: (id: string) => Promise<string>) {
    setBusy(true);
    try {
      setResults(await each(ids, act));
      onDone();
    } finally {
      setBusy(false);
    }
  }
  const cancel = (id: string) =>
    api<{ status: string }>(`/api/executions/${id}/cancel`, { method: "POST", body: "{}" }).then(
      (r) => `cancel asked (${r.status})`,
    );
  const rerun = (id: string) =>
    api<{ execution_id: string }>(`/api/executions/${id}/rerun`, { method: "POST" }).then(
      (r) => `re-run as ${r.execution_id}`,
    );
  return (
    <div className="bulk" data-testid="bulk-actions">
      <span>{selected.length} selected</span>
      {who.may.cancel && (
        <button disabled={busy || selected.length === 0} onClick={() => run(selected.map((r) => r.execution_id), cancel)}>
          Cancel selected
        </button>
      )}
      {who.may.act && (
        <button disabled={busy || retryable.length === 0} onClick={() => run(retryable.map((r) => r.execution_id), rerun)}>
          Retry failed/cancelled ({retryable.length})
        </button>
      )}
      {results.length > 0 && (
        <ul className="bulk-results" data-testid="bulk-results">
          {results.map((r) => (
            <li key={r.id} className={r.ok ? "ok" : "error"}>
              {r.id}: {r.text}
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}
