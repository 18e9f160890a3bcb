import { FormEvent, useState } from "react";
import { api, ApiError } from "../api/client";
import { navigate } from "../router";

/** The workload as a JSON object, or the reason it is not one (checked before sending). */
export function workloadOf(text: string): { workload?: Record<string, unknown>; error?: string } {
  let value: unknown;
  try {
    value = text.trim() === "" ? {} : JSON.parse(text);
  } catch (err) {
    return { error: `the workload is not JSON: ${(err as Error).message}` };
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    return { error: "the workload must be a JSON object, e.g. {\"amount\": 1200}" };
  }
  return { workload: value as Record<string, unknown> };
}

/** Start a run of one catalog version with a workload; opens the new run. */
export function StartRun({ path, version }: { path: string; version: number }) {
  const [text, setText] = useState("{}");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  async function start(e: FormEvent) {
    e.preventDefault();
    const { workload, error: bad } = workloadOf(text);
    if (bad) return setError(bad);
    setBusy(true);
    try {
      const out = await api<{ execution_id: string }>("/api/execute", {
        method: "POST",
        body: JSON.stringify({ path, version, workload }),
      });
      navigate({ page: "run", id: out.execution_id });
    } catch (err) {
      setError(err instanceof ApiError ? `${err.message} (${err.code})` : String(err));
    } finally {
      setBusy(false);
    }
  }

  return (
    <form className="start-run" onSubmit={start}>
      <label>
        Workload (JSON)
        <textarea name="workload" rows={4} value={text} onChange={(e) => { setText(e.target.value); setError(null); }} />
      </label>
      <button type="submit" disabled={busy}>Start run of v{version}</button>
      {error && <span className="error" role="alert" data-testid="workload-error">{error}</span>}
    </form>
  );
}
