import { useCallback, useEffect, useRef, useState } from "react";
import { api, query } from "../api/client";
import type { EventOut, EventPage } from "../api/types";

const FIRST = 500;
const PAGE = 10_000;

/** Every event of a run, read from GET /api/executions/{id}/events: a first page of 500
 * (the timeline shows rows at once), then pages of 10,000;
 * `pull()` fetches what came after the last one (called on each live change). */
export function useEvents(id: string): { events: EventOut[]; pull: () => void } {
  const [events, setEvents] = useState<EventOut[]>([]);
  const last = useRef(0);
  const busy = useRef(false);
  const again = useRef(false);

  const pull = useCallback(() => {
    if (busy.current) {
      again.current = true; // one more pass when this one ends, never two at once
      return;
    }
    busy.current = true;
    void (async () => {
      try {
        do {
          again.current = false;
          for (;;) {
            const page = await api<EventPage>(
              `/api/executions/${id}/events${query({ after: last.current, limit: last.current === 0 ? FIRST : PAGE })}`,
            );
            if (page.events.length) {
              last.current = page.events[page.events.length - 1].seq;
              setEvents((old) => old.concat(page.events));
            }
            if (page.next === null) break;
          }
        } while (again.current);
      } finally {
        busy.current = false;
      }
    })();
  }, [id]);

  useEffect(() => {
    last.current = 0;
    setEvents([]);
    pull();
  }, [id, pull]);
  return { events, pull };
}
