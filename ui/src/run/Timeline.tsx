import { useVirtualizer } from "@tanstack/react-virtual";
import { useMemo, useRef, useState } from "react";
import type { EventOut } from "../api/types";
import { statusColour } from "../status";

export const ROW_H = 26;

/** The run's events, virtualized: only the rows in view (and a few around) are in the
 * DOM, so 200,000 events cost what 40 do. Filterable by step and event type. */
export function Timeline({
  events,
  height = 360,
  onStep,
}: {
  events: EventOut[];
  height?: number;
  onStep?: (step: string) => void;
}) {
  const [step, setStep] = useState("");
  const [type, setType] = useState("");
  const steps = useMemo(() => distinct(events, (e) => e.step), [events]);
  const types = useMemo(() => distinct(events, (e) => e.event_type), [events]);
  const shown = useMemo(
    () => (step || type ? events.filter((e) => (!step || e.step === step) && (!type || e.event_type === type)) : events),
    [events, step, type],
  );
  const scroller = useRef<HTMLDivElement>(null);
  const rows = useVirtualizer({
    count: shown.length,
    getScrollElement: () => scroller.current,
    estimateSize: () => ROW_H,
    overscan: 10,
    initialRect: { width: 800, height },
  });
  return (
    <section className="timeline">
      <div className="filters">
        <h3 data-testid="event-count">Events ({shown.length.toLocaleString("en-US")})</h3>
        <select aria-label="step" value={step} onChange={(e) => setStep(e.target.value)}>
          <option value="">every step</option>
          {steps.map((s) => (
            <option key={s}>{s}</option>
          ))}
        </select>
        <select aria-label="event type" value={type} onChange={(e) => setType(e.target.value)}>
          <option value="">every type</option>
          {types.map((t) => (
            <option key={t}>{t}</option>
          ))}
        </select>
      </div>
      <div ref={scroller} className="timeline-scroll" data-testid="timeline" style={{ height, overflow: "auto" }}>
        <div style={{ height: rows.getTotalSize(), position: "relative" }}>
          {rows.getVirtualItems().map((v) => {
            const e = shown[v.index];
            return (
              <div
                key={e.seq}
                className="event-row"
                data-testid="event-row"
                onClick={e.step && onStep ? () => onStep(e.step as string) : undefined}
                style={{ position: "absolute", top: 0, left: 0, right: 0, height: ROW_H, transform: `translateY(${v.start}px)` }}
              >
                <span className="seq">{e.seq}</span>
                <span className="time">{e.created_at?.slice(11, 23) ?? ""}</span>
                <span className="etype">{e.event_type}</span>
                <span className="estep">{e.step ?? ""}</span>
                {e.status && (
                  <span className="badge" style={{ background: statusColour(e.status) }}>
                    {e.status}
                  </span>
                )}
                <span className="worker">{e.worker_id ?? ""}</span>
              </div>
            );
          })}
        </div>
      </div>
    </section>
  );
}

function distinct(events: EventOut[], key: (e: EventOut) => string | null): string[] {
  const seen = new Set<string>();
  for (const e of events) {
    const k = key(e);
    if (k) seen.add(k);
  }
  return [...seen].sort();
}
