import { useQuery } from "@tanstack/react-query";
import { useEffect, useState } from "react";
import { api, ApiError } from "../api/client";
import type { Whoami } from "../api/types";
import { when } from "../format";
import { StartRun } from "./StartRun";
import type { CatalogEntry, CatalogResource, Checked, Problem } from "./types";
import { YamlView } from "./YamlView";

const post = (body: unknown) => ({ method: "POST", body: JSON.stringify(body) });

/** The problems (422) or warnings (200) of a text, as POST /api/catalog/validate answers. */
export async function check(content: string): Promise<Checked> {
  try {
    const ok = await api<{ warnings: Problem[] }>("/api/catalog/validate", post({ content }));
    return { problems: [], warnings: ok.warnings };
  } catch (err) {
    const body = err instanceof ApiError ? (err.body as { problems?: unknown }) : null;
    if (err instanceof ApiError && err.code === "playbook_invalid" && Array.isArray(body?.problems)) {
      return { problems: body.problems as Problem[], warnings: [] };
    }
    throw err;
  }
}

/** Playbooks: the catalog by path with its versions, a version's YAML with its problems
 * marked, and a form to start a run of it. */
export function PlaybooksPage({ who }: { who: Whoami }) {
  const list = useQuery({
    queryKey: ["catalog"],
    queryFn: () => api<{ entries: CatalogEntry[] }>("/api/catalog/list", post({})),
  });
  const [picked, pick] = useState<{ path: string; version: number } | null>(null);
  const byPath = new Map<string, CatalogEntry[]>();
  for (const e of list.data?.entries ?? []) byPath.set(e.path, [...(byPath.get(e.path) ?? []), e]);

  return (
    <section className="playbooks">
      <h2>Playbooks</h2>
      {list.error && <p className="error">{(list.error as Error).message}</p>}
      <div className="split">
        <table className="list catalog">
          <thead><tr><th>Playbook</th><th>Versions</th></tr></thead>
          <tbody>
            {[...byPath].map(([path, versions]) => (
              <tr key={path} data-testid="catalog-entry" data-path={path}>
                <td>{path}</td>
                <td className="versions">
                  {versions.map((v) => (
                    <button
                      key={v.version}
                      title={`registered ${when(v.created_at)}`}
                      aria-pressed={picked?.path === path && picked.version === v.version}
                      onClick={() => pick({ path, version: v.version })}
                    >
                      v{v.version}
                    </button>
                  ))}
                </td>
              </tr>
            ))}
            {list.data && byPath.size === 0 && <tr><td colSpan={2} className="empty">The catalog is empty.</td></tr>}
          </tbody>
        </table>
        {picked && <Version key={`${picked.path}@${picked.version}`} {...picked} who={who} />}
      </div>
    </section>
  );
}

function Version({ path, version, who }: { path: string; version: number; who: Whoami }) {
  const entry = useQuery({
    queryKey: ["catalog", path, version],
    queryFn: () => api<CatalogResource>("/api/catalog/resource", post({ path, version })),
  });
  // the text shown is the stored one until edited: a draft is checked, never registered here
  const [draft, setDraft] = useState<string | null>(null);
  const [checked, setChecked] = useState<Checked | null>(null);
  const [error, setError] = useState<string | null>(null);
  const text = draft ?? entry.data?.content ?? "";
  const run = (content: string) => check(content).then(setChecked, (e) => setError(String(e.message ?? e)));
  useEffect(() => {
    if (entry.data) void run(entry.data.content);
  }, [entry.data]);

  if (entry.error) return <p className="error">{(entry.error as Error).message}</p>;
  if (!entry.data) return <p>Loading {path} v{version}…</p>;
  const problems = checked?.problems.length ?? 0;
  return (
    <div className="version" data-testid="version">
      <h3>
        {path} v{version}{" "}
        {checked && (
          <span className="badge" data-testid="validity" style={{ background: problems ? "#d64545" : "#27ae60" }}>
            {problems ? `${problems} problem(s)` : checked.warnings.length ? `valid, ${checked.warnings.length} warning(s)` : "valid"}
          </span>
        )}
      </h3>
      {error && <p className="error">{error}</p>}
      {draft === null ? (
        <button onClick={() => setDraft(entry.data.content)}>Edit a draft</button>
      ) : (
        <div className="draft">
          <textarea name="draft" rows={12} value={draft} onChange={(e) => setDraft(e.target.value)} />
          <button onClick={() => void run(draft)}>Check</button>
          <button onClick={() => { setDraft(null); void run(entry.data.content); }}>Back to v{version}</button>
        </div>
      )}
      <YamlView text={text} checked={checked} />
      {who.may.execute && <StartRun path={path} version={version} />}
    </div>
  );
}
