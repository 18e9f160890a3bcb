import { useQuery } from "@tanstack/react-query";
import { api } from "../api/client";
import type { Whoami } from "../api/types";
import { duration } from "../format";
import { statusColour, TERMINAL } from "../status";
import { Attempts, ChildRuns } from "./Attempts";
import { ErrorView } from "./ErrorView";
import { Json, ResultView } from "./ResultView";
import { StepActions } from "./StepActions";
import { StepLogs } from "./StepLogs";
import type { Described } from "./types";
import "./step.css";

/** One step of a run, beside its graph: input (redacted by the API), result, error with
 * its failing line, attempts, the child runs it started, usage, logs, and the actions the
 * role may take. Reads GET /api/executions/{id}/describe, re-read with the run's queries. */
export function StepPanel({ id, step, who, onClose }: { id: string; step: string; who: Whoami; onClose: () => void }) {
  const described = useQuery({
    queryKey: ["run", id, "describe"],
    queryFn: () => api<Described>(`/api/executions/${id}/describe`),
  });
  const body = (() => {
    if (described.error) return <p className="error">{(described.error as Error).message}</p>;
    if (!described.data) return <p className="muted">loading…</p>;
    const run = described.data;
    const detail = run.steps[step];
    if (!detail) return <p className="muted">step {step} has not started</p>;
    const ended = TERMINAL.has(run.status);
    return (
      <>
        <p>
          <span className="badge" data-testid="panel-status" style={{ background: statusColour(detail.status) }}>
            {detail.status}
          </span>{" "}
          {detail.runs > 1 && `run ${detail.runs} · `}
          {detail.duration_s !== null && `took ${duration(detail.duration_s)}`}
        </p>
        {who.may.act && <StepActions id={id} step={step} detail={detail} runStatus={run.status} ended={ended} />}
        {detail.error && <ErrorView error={detail.error} />}
        <ChildRuns attempts={detail.attempts} />
        <h4>Input</h4>
        <Json value={detail.input} testid="step-input" />
        <h4>Result</h4>
        <ResultView key={`${step}:${detail.runs}`} id={id} result={detail.result} />
        <h4>Attempts</h4>
        <Attempts attempts={detail.attempts} total={detail.attempts_total} />
        {detail.usage !== undefined && detail.usage !== null && (
          <>
            <h4>Usage</h4>
            <Json value={detail.usage} testid="step-usage" />
          </>
        )}
        <h4>Logs</h4>
        <StepLogs id={id} step={step} />
      </>
    );
  })();
  return (
    <aside className="step-panel" data-testid="step-panel" aria-label={`step ${step}`}>
      <div className="panel-head">
        <h3>{step}</h3>
        <button aria-label="close" onClick={onClose}>
          ×
        </button>
      </div>
      {body}
    </aside>
  );
}
