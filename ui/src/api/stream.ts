import { authHeaders } from "./client";
import { SseMessage, SseParser } from "./sse";

// Live updates over server-sent events read with fetch: EventSource cannot send the
// Authorization header. The stream is resumable (`?after=<seq>`); a route that answers
// 404 (a server without streams) makes the caller fall back to re-fetching every 5 s;
// a 401 (the token was revoked) or a broken connection is retried every 2 s.

export type StreamEnd = "ended" | "unsupported" | "closed";

export async function readStream(
  url: string,
  onMessage: (m: SseMessage) => void,
  signal: AbortSignal,
): Promise<StreamEnd> {
  const response = await fetch(url, {
    headers: { ...authHeaders(), Accept: "text/event-stream" },
    signal,
  });
  // 404: a server without the stream route; on the runs list, a server without
  // /api/executions/stream answers 422 (`stream` is no execution id): no stream either
  if (response.status >= 400 && response.status < 500 && response.status !== 401) return "unsupported";
  if (!response.ok || !response.body) throw new Error(`stream ${url}: ${response.status}`);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  const parser = new SseParser();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return "closed";
    for (const message of parser.feed(value)) {
      if (message.event === "end") {
        await reader.cancel();
        return "ended";
      }
      onMessage(message);
    }
  }
}

export const POLL_MS = 5000;
const RETRY_MS = 2000;
export const MIN_INTERVAL_MS = 250;

/**
 * Follow `path` (a stream route) from `opts.after`: `onChange` runs for each message
 * (coalesced to one call per animation frame and at most one per `minIntervalMs`, so a
 * burst of 1,000 events costs one re-fetch). Falls back to one
 * call every `POLL_MS` while the tab is visible when the server has no stream route.
 * Returns a function that stops it.
 */
export function follow(
  path: (after: number) => string,
  onChange: () => void,
  opts: { onEnd?: () => void; pollMs?: number; after?: number; minIntervalMs?: number } = {},
): () => void {
  // where to resume: the caller read the log up to `after` (the run's `last_seq`), so the
  // stream sends only what comes next, never a backlog of 200,000 events it already has
  let after = opts.after ?? 0;
  let pending = false;
  let last = 0;
  const gap = opts.minIntervalMs ?? MIN_INTERVAL_MS;
  const changed = () => {
    if (pending) return;
    pending = true;
    const run = () => {
      pending = false;
      last = Date.now();
      onChange();
    };
    // at most one call per `gap` ms: a run of 100,000 iterations changes all the time,
    // and each call re-reads what the page shows
    const wait = Math.max(0, last + gap - Date.now());
    if (wait > 0) setTimeout(run, wait);
    else if (typeof requestAnimationFrame === "function") requestAnimationFrame(run);
    else setTimeout(run, 0);
  };
  return reconnecting(
    () => path(after),
    (m) => {
      const seq = m.id === null ? NaN : Number(m.id);
      if (Number.isFinite(seq)) after = Math.max(after, seq);
      changed();
    },
    {
      onPoll: onChange,
      pollMs: opts.pollMs,
      onEnd: () => {
        changed();
        opts.onEnd?.();
      },
    },
  );
}

/**
 * Read the stream at `url()` for as long as it lasts: when it closes or breaks, read it
 * again after `RETRY_MS` (`url()` is asked again, so the caller resumes after what it
 * saw); at its `end` message call `onEnd` and stop (without `onEnd`, an end is one more
 * reconnect); a server without the route makes it call `onPoll` every `pollMs` while the
 * tab is visible. Returns a function that stops it.
 */
export function reconnecting(
  url: () => string,
  onMessage: (m: SseMessage) => void,
  opts: { onPoll: () => void; pollMs?: number; onEnd?: () => void },
): () => void {
  const abort = new AbortController();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const every = opts.pollMs ?? POLL_MS;
  const poll = () => {
    if (abort.signal.aborted) return;
    if (typeof document === "undefined" || document.visibilityState !== "hidden") opts.onPoll();
    timer = setTimeout(poll, every);
  };
  const loop = async () => {
    while (!abort.signal.aborted) {
      try {
        const end = await readStream(url(), onMessage, abort.signal);
        if (end === "unsupported") {
          timer = setTimeout(poll, every);
          return;
        }
        if (end === "ended" && opts.onEnd) {
          opts.onEnd();
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
