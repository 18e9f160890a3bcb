import { useState } from "react";
import { api } from "../api/client";
import { resultRef } from "./reference";

export function Json({ value, testid }: { value: unknown; testid?: string }) {
  if (value === undefined || value === null) return <p className="muted">none</p>;
  return (
    <pre className="json" data-testid={testid}>
      {typeof value === "string" ? value : JSON.stringify(value, null, 2)}
    </pre>
  );
}

/** A step's result: inline as the describe gives it, or, kept by reference in the result
 * store, read when asked (GET /api/executions/{id}/results/{result_id}). */
export function ResultView({ id, result }: { id: string; result: unknown }) {
  const ref = resultRef(id, result);
  const [loaded, setLoaded] = useState<{ value: unknown } | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  if (!ref) return <Json value={result} testid="step-result" />;
  if (loaded) return <Json value={loaded.value} testid="step-result" />;
  async function load() {
    if (!ref) return;
    setBusy(true);
    setError(null);
    try {
      // the entry is the report's payload: the step's result is its `result`
      const entry = await api<Record<string, unknown>>(`/api/executions/${id}/results/${ref.resultId}`);
      setLoaded({ value: entry && "result" in entry ? entry.result : entry });
    } catch (e) {
      setError((e as Error).message);
    } finally {
      setBusy(false);
    }
  }
  return (
    <div>
      <button data-testid="load-result" disabled={busy} onClick={load}>
        Load result{ref.size !== null && ` (${ref.size.toLocaleString()} bytes)`}
      </button>
      {error && <p className="error">{error}</p>}
    </div>
  );
}
