export function when(iso: string | null): string {
  if (!iso) return "–";
  const d = new Date(iso);
  return d.toLocaleString(undefined, { hour12: false });
}

export function duration(seconds: number | null, startIso?: string | null): string {
  let s = seconds;
  if (s === null && startIso) s = (Date.now() - new Date(startIso).getTime()) / 1000;
  if (s === null || !Number.isFinite(s)) return "–";
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.round(s % 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}
