import { useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { api, ApiError } from "../api/client";
import { navigate } from "../router";
import type { Started, StepDetail } from "./types";

const DONE = new Set(["COMPLETED", "SKIPPED"]);
const RESTARTABLE = new Set(["FAILED", "CANCELLED"]);

/** What an operator may do to a step (the caller shows this only to a role that may act):
 * on a run still going, retry it now or skip it with a result; on a run that ended FAILED
 * or CANCELLED, which is never moved again, restart it from this step as a new run. The
 * API's refusals (409, 422) are shown with its message. */
export function StepActions({
  id,
  step,
  detail,
  runStatus,
  ended,
}: {
  id: string;
  step: string;
  detail: StepDetail;
  runStatus: string;
  ended: boolean;
}) {
  const client = useQueryClient();
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [skipping, setSkipping] = useState(false);
  const [result, setResult] = useState("null");
  const base = `/api/executions/${id}`;
  const path = `${base}/steps/${encodeURIComponent(step)}`;

  async function act(run: () => Promise<void>) {
    setBusy(true);
    setError(null);
    try {
      await run();
    } catch (e) {
      setError(e instanceof ApiError ? `${e.status} ${e.code}: ${e.message}` : (e as Error).message);
    } finally {
      setBusy(false);
    }
  }
  const retry = () =>
    act(async () => {
      await api(`${path}/retry`, { method: "POST", body: "{}" });
      await client.invalidateQueries({ queryKey: ["run", id] });
    });
  const skip = () =>
    act(async () => {
      let value: unknown;
      try {
        value = JSON.parse(result);
      } catch (e) {
        throw new Error(`result: not JSON (${(e as Error).message})`);
      }
      await api(`${path}/skip`, { method: "POST", body: JSON.stringify({ result: value }) });
      setSkipping(false);
      await client.invalidateQueries({ queryKey: ["run", id] });
    });
  const restart = () =>
    act(async () => {
      const started = await api<Started>(`${base}/restart`, {
        method: "POST",
        body: JSON.stringify({ from_step: step }),
      });
      navigate({ page: "run", id: started.execution_id });
    });

  const live = !ended && !DONE.has(detail.status);
  const offered = {
    retry: live && detail.attempts.length > 0,
    skip: live,
    restart: ended && RESTARTABLE.has(runStatus),
  };
  if (!offered.retry && !offered.skip && !offered.restart) return null;
  return (
    <div className="step-actions" data-testid="step-actions">
      {offered.retry && (
        <button data-testid="retry" disabled={busy} onClick={retry}>
          Retry now
        </button>
      )}
      {offered.restart && (
        <button data-testid="restart" disabled={busy} onClick={restart} title="The run ended: a new run starts from this step, reusing the results before it">
          Retry from this step (new run)
        </button>
      )}
      {offered.skip && !skipping && (
        <button data-testid="skip" disabled={busy} onClick={() => setSkipping(true)}>
          Skip…
        </button>
      )}
      {offered.skip && skipping && (
        <div className="skip-form">
          <label>
            The step's result (JSON)
            <textarea
              name="result"
              data-testid="skip-result"
              value={result}
              rows={4}
              onChange={(e) => setResult(e.target.value)}
            />
          </label>
          <button data-testid="skip-confirm" disabled={busy} onClick={skip}>
            Skip with this result
          </button>
          <button onClick={() => setSkipping(false)}>Back</button>
        </div>
      )}
      {error && (
        <p className="error" data-testid="action-error">
          {error}
        </p>
      )}
    </div>
  );
}
