import { useEffect, useState } from "react";
import type { Wait } from "./api/types";

/** A length of time as `core/durations.span` writes it: `12s`, `4m 10s`, `3h 05m`, `2d 1h`. */
export function span(seconds: number): string {
  const left = Math.max(Math.floor(seconds), 0);
  const days = Math.floor(left / 86400);
  const hours = Math.floor((left % 86400) / 3600);
  const minutes = Math.floor((left % 3600) / 60);
  const secs = left % 60;
  if (days) return `${days}d ${hours}h`;
  if (hours) return `${hours}h ${String(minutes).padStart(2, "0")}m`;
  return minutes ? `${minutes}m ${String(secs).padStart(2, "0")}s` : `${secs}s`;
}

function until(due: string | null, now: number): string {
  if (!due) return "soon";
  const s = (new Date(due).getTime() - now) / 1000;
  return s >= 1 ? `in ${span(s)}` : "now";
}

/** A wait in one line, its times from `now` (ms), as `core/waiting.text` says it:
 * `retrying in 9m 12s, attempt 2 of 3, after: ValueError: boom` (`withError` false: without
 * its last part, for a step's box). */
export function waitText(w: Wait, now: number, withError = true): string {
  let line: string;
  if (w.kind === "retry" || w.kind === "policy_retry") {
    line = `retrying ${w.due_at ? until(w.due_at, now) : "soon"}`;
    if (w.task) line = `task '${w.task}' ${line}`;
    if (w.attempt !== null) line += `, attempt ${w.attempt}${w.attempts !== null ? ` of ${w.attempts}` : ""}`;
    if (withError && w.error?.message) line += `, after: ${w.error.message}`;
  } else if (w.kind === "approval") {
    line = `waiting for approval${w.approval_id ? ` ${w.approval_id}` : ""}`;
    if (w.due_at) {
      const s = (new Date(w.due_at).getTime() - now) / 1000;
      line += s > 0 ? `, which expires in ${span(s)}` : ", which has expired";
    }
  } else if (w.kind === "cancel_grace") {
    line = `cancel requested: the attempts still out are abandoned ${w.due_at ? until(w.due_at, now) : "once they stop"}`;
  } else if (w.kind === "no_worker") {
    line = `queued in pool ${w.pool ?? "default"}, which no live worker serves`;
  } else if (w.kind === "queued") {
    line = `queued for a worker of pool ${w.pool ?? "default"}`;
  } else {
    line = w.worker ? `running on ${w.worker}` : "running";
    if (w.attempt !== null) line += `, attempt ${w.attempt}`;
  }
  return line + (w.count > 1 ? ` (and ${w.count - 1} more)` : "");
}

/** Where a wait is: `step 'flaky'`, `step 'each[3]'`, or the run. */
export function waitWhere(w: Wait): string {
  if (w.step === null) return "";
  return `step '${w.index === null ? w.step : `${w.step}[${w.index}]`}' `;
}

/** Whether a wait holds the run back (a retry timer, a person, a cancel's grace) rather
 * than being work under way; a pool without a worker is the diagnosis banner's, which says
 * how to start one. */
export function blocking(w: Wait): boolean {
  return !["queued", "claimed", "no_worker"].includes(w.kind);
}

/** The clock a relative time is rendered from, ticking every second. */
export function useNow(): number {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(timer);
  }, []);
  return now;
}
