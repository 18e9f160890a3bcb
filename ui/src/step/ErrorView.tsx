import type { StepError } from "./types";

/** A step's error: its kind and message, and the line of code it failed on when the tool
 * says (a python step's exception). */
export function ErrorView({ error }: { error: StepError }) {
  const message = error.message ?? error.reason ?? "failed";
  return (
    <div className="step-error" data-testid="step-error">
      <p>
        {error.kind && <strong>{error.kind}: </strong>}
        {String(message)}
      </p>
      {error.line !== undefined && error.line !== null && (
        <pre className="code-line" data-testid="step-error-line">
          line {error.line}: {error.code_line ?? ""}
        </pre>
      )}
    </div>
  );
}
