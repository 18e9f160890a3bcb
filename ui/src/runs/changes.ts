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

/**
 * A page with one change of the stream applied in place: a row it shows is replaced (or
 * dropped when it no longer matches the filters, e.g. a RUNNING filter and a run that
 * ended); a new run that matches is put on top of the first page (the list is newest
 * first), the page keeping its length. Other pages are left alone: their rows are older.
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
