import type { Checked, Problem } from "./types";

/** The playbook text with line numbers, each problem and warning marked on its line (those
 * without a line listed above the text). */
export function YamlView({ text, checked }: { text: string; checked: Checked | null }) {
  const byLine = new Map<number, { problem: Problem; kind: "problem" | "warning" }[]>();
  const unplaced: { problem: Problem; kind: "problem" | "warning" }[] = [];
  for (const kind of ["problem", "warning"] as const) {
    for (const problem of (kind === "problem" ? checked?.problems : checked?.warnings) ?? []) {
      const at = problem.line;
      if (at === null) unplaced.push({ problem, kind });
      else byLine.set(at, [...(byLine.get(at) ?? []), { problem, kind }]);
    }
  }
  return (
    <div className="yaml">
      {unplaced.map(({ problem, kind }, i) => (
        <div key={i} className={`mark ${kind}`} data-testid={kind}>{problem.message}</div>
      ))}
      {text.split("\n").map((line, i) => {
        const marks = byLine.get(i + 1) ?? [];
        const worst = marks.some((m) => m.kind === "problem") ? "problem" : marks.length ? "warning" : "";
        return (
          <div key={i} className={`yaml-line ${worst}`} data-line={i + 1} data-mark={worst || undefined}>
            <span className="lineno">{i + 1}</span>
            <code>{line || " "}</code>
            {marks.map(({ problem, kind }, j) => (
              <div key={j} className={`mark ${kind}`} data-testid={kind} data-line={i + 1}>
                {problem.message}
              </div>
            ))}
          </div>
        );
      })}
    </div>
  );
}
