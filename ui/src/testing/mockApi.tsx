import { QueryClient, QueryClientProvider } from "@tanstack/react-query";
import { render } from "@testing-library/react";
import type { ReactElement } from "react";
import { vi } from "vitest";
import type { Whoami } from "../api/types";

export interface Call {
  method: string;
  url: string;
  body: unknown;
}

/** A reply: JSON with a status, or a function of the call. */
export type Reply = { status?: number; body: unknown } | ((call: Call) => { status?: number; body: unknown });

/** Stubs `fetch` with `routes` ("METHOD /path?query" -> reply, matched on the whole
 * path and query first, then on the path alone); what no route names is a 404. Returns
 * the calls made, for asserting what was sent. */
export function mockApi(routes: Record<string, Reply>): Call[] {
  const calls: Call[] = [];
  vi.stubGlobal(
    "fetch",
    vi.fn(async (url: string, init: RequestInit = {}) => {
      const method = (init.method ?? "GET").toUpperCase();
      const body = typeof init.body === "string" ? JSON.parse(init.body) : null;
      const call = { method, url, body };
      calls.push(call);
      const reply = routes[`${method} ${url}`] ?? routes[`${method} ${url.split("?")[0]}`];
      const out = typeof reply === "function" ? reply(call) : reply ?? { status: 404, body: { code: "not_found", message: `no ${url}` } };
      return new Response(JSON.stringify(out.body), { status: out.status ?? 200 });
    }),
  );
  return calls;
}

export function renderWithClient(ui: ReactElement) {
  const client = new QueryClient({ defaultOptions: { queries: { retry: false } } });
  return render(<QueryClientProvider client={client}>{ui}</QueryClientProvider>);
}

export function who(role: string, may: Partial<Whoami["may"]> = {}): Whoami {
  return { role, name: null, user: "alice", may: { cancel: false, execute: false, act: false, approve: false, ...may } };
}
