import { useQueryClient, type QueryKey } from "@tanstack/react-query";
import { useEffect } from "react";
import { follow } from "./api/stream";

/** Re-fetch the queries under `keys` when the stream at `path` says something changed
 * (or every 5 s while the server has no stream route). Off when `enabled` is false. */
export function useLive(path: (after: number) => string, keys: QueryKey[], enabled = true) {
  const client = useQueryClient();
  const id = JSON.stringify(keys);
  useEffect(() => {
    if (!enabled) return;
    const refresh = () => keys.forEach((queryKey) => void client.invalidateQueries({ queryKey }));
    return follow(path, refresh, { onEnd: refresh });
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [id, enabled, client]);
}
