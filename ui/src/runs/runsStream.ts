import type { ExecutionItem } from "../api/types";
import { query } from "../api/client";
import { reconnecting } from "../api/stream";

/**
 * Follow GET /api/executions/stream: `onRun` gets each changed row (a new run, one whose
 * step exited, with its new `steps_done`, one that ended). Its ids are `<time>:<id>` strings, so it resumes with `after=<last id>` itself
 * (the run stream's `follow` keeps numeric seqs). A server without the route makes it call
 * `onPoll` every 5 s instead. Returns a function that stops it.
 */
export function followRuns(onRun: (run: ExecutionItem) => void, onPoll: () => void): () => void {
  let after: string | undefined;
  return reconnecting(
    () => `/api/executions/stream${query({ after })}`,
    (m) => {
      if (m.event !== "execution") return;
      if (m.id) after = m.id;
      onRun(JSON.parse(m.data) as ExecutionItem);
    },
    { onPoll },
  );
}
