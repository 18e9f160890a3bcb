import { followRuns } from "../runs/runsStream";

/** The least time between two re-reads of the list: a busy server's runs stream carries
 * every run's progress, and each message is only a cue that an approval may have changed. */
export const APPROVALS_GAP_MS = 1000;

/**
 * Call `onChange` when an approval may have changed. Every change of an approval (requested,
 * a vote, granted, denied, expired, invalidated, cancelled with its step or run) moves its
 * run's row on the runs list's stream (GET /api/executions/stream), so a message there is
 * the cue to read the approvals again: at most once per `gapMs`, a burst costing one read.
 * A server without that stream: every 5 s (the stream's poll). Returns a function that
 * stops it.
 */
export function followApprovals(onChange: () => void, gapMs = APPROVALS_GAP_MS): () => void {
  let timer: ReturnType<typeof setTimeout> | undefined;
  let last = 0;
  const cue = () => {
    if (timer !== undefined) return; // a read is due already: it sees this change too
    timer = setTimeout(() => {
      timer = undefined;
      last = Date.now();
      onChange();
    }, Math.max(0, last + gapMs - Date.now()));
  };
  const stop = followRuns(cue, onChange);
  return () => {
    stop();
    if (timer !== undefined) clearTimeout(timer);
  };
}
