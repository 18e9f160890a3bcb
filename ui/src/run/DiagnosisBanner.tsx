import { useQuery } from "@tanstack/react-query";
import { api } from "../api/client";
import { TERMINAL } from "../status";
import type { Diagnosis, Finding } from "../step/types";
import "../step/step.css";

/** The kinds of `core/diagnosis.py` that say a run is under way, not stuck; and those the
 * wait banner shows, ticking, from the run's `waits` (`WaitBanner`). */
const MOVING = new Set(["claimed", "queued", "child_running", "loop_waiting", "join_waiting", "compensating", "tearing_down", "completed", "idle"]);
const WAITS = new Set(["retry_pending", "awaiting_approval", "cancel_pending"]);
const POLL_MS = 5000;

/** What the doctor finds (GET /api/executions/{id}/diagnosis): for a run not ended, the
 * first finding when it says the run is not moving (no worker, a lost lease, an approval
 * or a retry waited on, ...); for a failed run, its first error. Nothing otherwise. */
export function DiagnosisBanner({ id, status }: { id: string; status: string }) {
  const ended = TERMINAL.has(status);
  const wanted = !ended || status === "FAILED";
  const diagnosis = useQuery({
    queryKey: ["run", id, "diagnosis"],
    queryFn: () => api<Diagnosis>(`/api/executions/${id}/diagnosis`),
    enabled: wanted,
    // a run that stops moving appends nothing that would re-read it: look again on a clock
    refetchInterval: ended ? false : POLL_MS,
  });
  if (!wanted || !diagnosis.data) return null;
  const first: Finding | undefined = diagnosis.data.findings[0];
  if (!first) return null;
  if (ended ? first.kind !== "failed" : MOVING.has(first.kind) || WAITS.has(first.kind)) return null;
  return (
    <div className={`diagnosis${ended ? " failed" : ""}`} data-testid="diagnosis" data-kind={first.kind} role="status">
      <p>
        <strong>{ended ? "Failed" : "Not moving"}</strong>
        {first.step && ` at step ${first.step}`}: {first.message}
      </p>
    </div>
  );
}
