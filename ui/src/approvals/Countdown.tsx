import { useEffect, useState } from "react";

export function left(untilIso: string, now: number): string {
  const s = Math.floor((new Date(untilIso).getTime() - now) / 1000);
  if (s <= 0) return "expired";
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = s % 60;
  return h > 0 ? `${h} h ${m} min left` : m > 0 ? `${m} min ${sec} s left` : `${sec} s left`;
}

/** The time left until `until`, ticking every second. */
export function Countdown({ until }: { until: string | null }) {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(timer);
  }, []);
  if (!until) return <span>no expiry</span>;
  return <span data-testid="time-left">{left(until, now)}</span>;
}
