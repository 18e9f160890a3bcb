import type { ExecutionItem } from "../api/types";
import { query } from "../api/client";
import { POLL_MS, readStream } from "../api/stream";

const RETRY_MS = 2000;

/**
 * Follow GET /api/executions/stream: `onRun` gets each changed row (a new run, one that
 * ended). Its ids are `<time>:<id>` strings, so it resumes with `after=<last id>` itself
 * (the run stream's `follow` keeps numeric seqs). A server without the route makes it call
 * `onPoll` every `POLL_MS` instead. Returns a function that stops it.
 */
export function followRuns(onRun: (run: ExecutionItem) => void, onPoll: () => void): () => void {
  const abort = new AbortController();
  let after: string | undefined;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const poll = () => {
    if (abort.signal.aborted) return;
    if (typeof document === "undefined" || document.visibilityState !== "hidden") onPoll();
    timer = setTimeout(poll, POLL_MS);
  };
  const loop = async () => {
    while (!abort.signal.aborted) {
      try {
        const end = await readStream(
          `/api/executions/stream${query({ after })}`,
          (m) => {
            if (m.event !== "execution") return;
            if (m.id) after = m.id;
            onRun(JSON.parse(m.data) as ExecutionItem);
          },
          abort.signal,
        );
        if (end === "unsupported") {
          timer = setTimeout(poll, POLL_MS);
          return;
        }
      } catch {
        if (abort.signal.aborted) return;
      }
      await new Promise((r) => (timer = setTimeout(r, RETRY_MS)));
    }
  };
  void loop();
  return () => {
    abort.abort();
    if (timer !== undefined) clearTimeout(timer);
  };
}
