import type { ExecutionItem, ExecutionList } from "../api/types";

/** What the list shows: the filters of GET /api/executions, as the page holds them. */
export interface RunsFilter {
  status: string;
  path: string;
  since: string;
}

/** The start the `since` choice means, in epoch ms (0: any time). */
export const SINCE_S: Record<string, number> = { "": 0, "1h": 3600, "24h": 86400, "7d": 7 * 86400 };

function matches(run: ExecutionItem, f: RunsFilter, now: number): boolean {
  if (f.status && run.status !== f.status) return false;
  if (f.path.trim() && run.path !== f.path.trim()) return false;
  const since = SINCE_S[f.since];
  if (since && run.created_at && new Date(run.created_at).getTime() < now - since * 1000) return false;
  return true;
}

/** Whether `run` is an older version of the row `shown` (by `updated_at`, which moves
 * at a run's start, at each step's exit and at its end). */
function older(run: ExecutionItem, shown: ExecutionItem): boolean {
  if (!run.updated_at || !shown.updated_at) return false;
  return new Date(run.updated_at).getTime() < new Date(shown.updated_at).getTime();
}

/**
 * A page with one change of the stream applied in place: a row it shows is replaced (or
 * dropped when it no longer matches the filters, e.g. a RUNNING filter and a run that
 * ended), unless the row shown is newer (the stream starts a few seconds back, so it
 * replays versions the list already read past: an earlier step count, a run's start
 * after its end); a new run that matches is put on top of the first page (the list is
 * newest first), the page keeping its length. Other pages are left alone: their rows are
 * older.
 */
export function applyChange(
  page: ExecutionList,
  run: ExecutionItem,
  filter: RunsFilter,
  firstPage: boolean,
  now = Date.now(),
): ExecutionList {
  const at = page.items.findIndex((r) => r.execution_id === run.execution_id);
  const fits = matches(run, filter, now);
  if (at >= 0) {
    if (older(run, page.items[at])) return page;
    const items = page.items.slice();
    if (fits) items[at] = run;
    else items.splice(at, 1);
    return { ...page, items };
  }
  if (!fits || !firstPage) return page;
  const items = [run, ...page.items];
  if (items.length > page.limit) items.length = page.limit;
  return { ...page, items };
}
