/** The id under which the result store keeps a result of run `id`: a describe shows a
 * result too large for the log's row as `{reference: {uri, size}}`, a NoETL worker's as
 * `{kind: "ref", uri}`; only `milepost://results/<id>/<n>` of this run is read here. */
export function resultRef(id: string, result: unknown): { resultId: string; size: number | null } | null {
  if (!result || typeof result !== "object") return null;
  const r = result as { reference?: { uri?: unknown; size?: unknown }; kind?: unknown; uri?: unknown };
  const uri = r.reference?.uri ?? (r.kind === "ref" ? r.uri : undefined);
  if (typeof uri !== "string") return null;
  const m = uri.match(/^milepost:\/\/results\/([0-9]+)\/([0-9]+)$/);
  if (!m || m[1] !== id) return null;
  const size = r.reference?.size;
  return { resultId: m[2], size: typeof size === "number" ? size : null };
}
