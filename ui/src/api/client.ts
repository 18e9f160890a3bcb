import { getToken } from "./session";

/** An API error as the server words it: `{code, message, ...fields}`. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    /** The whole reply body (e.g. the `problems` of a 422), for a page that shows more. */
    readonly body: unknown = null,
  ) {
    super(message);
  }
}

export function authHeaders(token = getToken()): Record<string, string> {
  return token ? { Authorization: `Bearer ${token}` } : {};
}

export async function api<T>(path: string, init: RequestInit = {}, token?: string): Promise<T> {
  const headers: Record<string, string> = { ...authHeaders(token ?? getToken()) };
  if (init.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { ...init, headers: { ...headers, ...(init.headers ?? {}) } });
  const text = await response.text();
  const body = text ? JSON.parse(text) : null;
  if (!response.ok) {
    throw new ApiError(response.status, body?.code ?? "error", body?.message ?? response.statusText, body);
  }
  return body as T;
}

export function query(params: Record<string, string | number | undefined | null>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : "";
}
