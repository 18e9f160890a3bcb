import { useQuery } from "@tanstack/react-query";
import { api, query } from "../api/client";
import type { LogsPage } from "./types";

const LIMIT = 500;

/** What the step's attempts printed (GET /api/executions/{id}/logs?step=), redacted and
 * capped by the worker; re-read on each live change of the run (its query key is under
 * the run's). */
export function StepLogs({ id, step }: { id: string; step: string }) {
  const logs = useQuery({
    queryKey: ["run", id, "logs", step],
    queryFn: () => api<LogsPage>(`/api/executions/${id}/logs${query({ step, limit: LIMIT })}`),
  });
  if (logs.error) return <p className="error">{(logs.error as Error).message}</p>;
  if (!logs.data) return <p className="muted">loading logs…</p>;
  const entries = logs.data.entries;
  if (!entries.length) return <p className="muted">nothing printed</p>;
  return (
    <div className="step-logs" data-testid="step-logs">
      {entries.length === LIMIT && <p className="muted">the first {LIMIT} entries (`milepost logs` reads them all)</p>}
      {entries.map((e) => (
        <div key={e.cursor} className={`log ${e.stream}`}>
          <span className="muted">
            attempt {e.attempt} · {e.stream}
            {e.cut > 0 && ` · ${e.cut.toLocaleString()} bytes cut`}
          </span>
          <pre>{e.text}</pre>
        </div>
      ))}
    </div>
  );
}
