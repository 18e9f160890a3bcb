import type { QueryClient } from "@tanstack/react-query";
import { api, query } from "../api/client";
import type { ExecutionOut, RunGraph } from "../api/types";

/** The run page's reads of a run: its row and its graph. */
export const runQuery = (id: string) => ({
  queryKey: ["run", id, "execution"],
  queryFn: () => api<ExecutionOut>(`/api/executions/${id}${query({ events_limit: 0 })}`),
});

export const graphQuery = (id: string) => ({
  queryKey: ["run", id, "graph"],
  queryFn: () => api<RunGraph>(`/api/executions/${id}/graph`),
});

/** Ask for a run and its graph at start-up, with whoami, not after it: a run page opened
 * directly (a link, a reload) starts its layout a round trip and a render sooner. */
export function prefetchRun(client: QueryClient, id: string): void {
  void client.prefetchQuery(runQuery(id));
  void client.prefetchQuery(graphQuery(id));
}
