import type { Wait } from "../api/types";
import { blocking, useNow, waitText, waitWhere } from "../waits";
import "../step/step.css";

/** What a running run waits on (`waits` of GET /api/executions/{id}): a retry timer, an
 * approval, a missing worker, a cancel's grace; work merely under way is left to the graph. */
export function WaitBanner({ waits }: { waits: Wait[] | undefined }) {
  const now = useNow();
  const shown = (waits ?? []).filter(blocking);
  if (shown.length === 0) return null;
  return (
    <div className="waits" role="status" data-testid="waits">
      {shown.map((w) => (
        <p key={`${w.kind}:${w.step}`} data-testid="wait" data-kind={w.kind} data-step={w.step ?? ""}>
          <strong>Waiting</strong> {waitWhere(w)}
          {waitText(w, now)}
        </p>
      ))}
    </div>
  );
}
