import { QueryClient, QueryClientProvider } from "@tanstack/react-query";
import { fireEvent, render, screen, waitFor } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { ExecutionItem, ExecutionList, Whoami } from "../api/types";
import { applyChange } from "./changes";
import { RunsPage, runsUrl } from "./RunsPage";

function run(id: string, status = "RUNNING", extra: Partial<ExecutionItem> = {}): ExecutionItem {
  return {
    execution_id: id, path: "tests/hello", version: 1, status, created_at: "2026-01-01T00:00:00Z",
    updated_at: "2026-01-01T00:00:00Z", parent_execution_id: null, ended_at: null, duration_s: null,
    started_by: "user:ada", steps_done: 1, steps_total: 2, ...extra,
  };
}

const OPERATOR: Whoami = { role: "operator", name: "op", user: null, may: { cancel: true, execute: true, act: true, approve: false } };
const VIEWER: Whoami = { role: "viewer", name: "v", user: null, may: { cancel: false, execute: false, act: false, approve: false } };

/** A stream the test writes messages into, as the server would. */
function controlledStream() {
  let push: (text: string) => void = () => {};
  const body = new ReadableStream<Uint8Array>({
    start(c) {
      push = (text) => c.enqueue(new TextEncoder().encode(text));
    },
  });
  return { response: new Response(body, { status: 200, headers: { "Content-Type": "text/event-stream" } }), push: (t: string) => push(t) };
}

function serve(list: ExecutionList) {
  const stream = controlledStream();
  const fetch = vi.spyOn(globalThis, "fetch").mockImplementation(async (input) => {
    const url = String(input);
    if (url.startsWith("/api/executions/stream")) return stream.response;
    return new Response(JSON.stringify(list), { status: 200, headers: { "Content-Type": "application/json" } });
  });
  return { fetch, push: stream.push };
}

function show(who: Whoami) {
  const client = new QueryClient({ defaultOptions: { queries: { retry: false } } });
  return render(
    <QueryClientProvider client={client}>
      <RunsPage who={who} />
    </QueryClientProvider>,
  );
}

afterEach(() => vi.restoreAllMocks());

describe("runsUrl", () => {
  it("puts the filters and the page's cursor in the query", () => {
    const now = Date.parse("2026-03-01T12:00:00Z");
    const url = new URL(runsUrl({ status: "FAILED", path: " etl/daily ", since: "1h" }, "1.5:7", now), "http://x");
    expect(url.pathname).toBe("/api/executions");
    expect(Object.fromEntries(url.searchParams)).toEqual({
      status: "FAILED", path: "etl/daily", since: "2026-03-01T11:00:00.000Z", limit: "50", cursor: "1.5:7",
    });
    expect(runsUrl({ status: "", path: "", since: "" })).toBe("/api/executions?limit=50");
  });
});

describe("applyChange", () => {
  const page: ExecutionList = { items: [run("2"), run("1")], limit: 2, offset: 0 };
  const any = { status: "", path: "", since: "" };
  it("replaces a row in place, puts a new run on top of the first page only", () => {
    expect(applyChange(page, run("1", "CANCELLED"), any, true).items.map((r) => [r.execution_id, r.status])).toEqual([
      ["2", "RUNNING"], ["1", "CANCELLED"],
    ]);
    expect(applyChange(page, run("3"), any, true).items.map((r) => r.execution_id)).toEqual(["3", "2"]);
    expect(applyChange(page, run("3"), any, false)).toBe(page);
  });
  it("keeps a row newer than the change: the stream replays its last seconds", () => {
    const shown: ExecutionList = { ...page, items: [run("2", "COMPLETED", { updated_at: "2026-01-01T00:00:09Z", steps_done: 2 })] };
    expect(applyChange(shown, run("2", "RUNNING", { updated_at: "2026-01-01T00:00:04Z" }), any, true)).toBe(shown);
    const later = run("2", "COMPLETED", { updated_at: "2026-01-01T00:00:09Z", steps_done: 2, duration_s: 9 });
    expect(applyChange(shown, later, any, true).items[0]).toBe(later); // the same version again: taken
  });
  it("drops a row that no longer matches the status filter", () => {
    const running = { ...any, status: "RUNNING" };
    expect(applyChange(page, run("2", "COMPLETED"), running, true).items.map((r) => r.execution_id)).toEqual(["1"]);
    expect(applyChange(page, run("9", "COMPLETED"), running, true)).toBe(page);
  });
});

describe("RunsPage", () => {
  it("asks the server for what the filters say", async () => {
    const { fetch } = serve({ items: [run("1")], limit: 50, offset: 0, next: null });
    show(VIEWER);
    await screen.findByText("user:ada");
    fireEvent.change(screen.getByRole("combobox", { name: "Status" }), { target: { value: "FAILED" } });
    fireEvent.change(screen.getByPlaceholderText("catalog path"), { target: { value: "etl/daily" } });
    await waitFor(() => {
      const lists = fetch.mock.calls.map((c) => String(c[0])).filter((u) => !u.includes("/stream"));
      expect(lists[lists.length - 1]).toBe("/api/executions?status=FAILED&path=etl%2Fdaily&limit=50");
    });
  });

  it("updates a row in place from a stream message, without fetching the list again", async () => {
    const { fetch, push } = serve({ items: [run("5"), run("4")], limit: 50, offset: 0, next: null });
    show(OPERATOR);
    const rows = await screen.findAllByTestId("run-row");
    expect(rows.map((r) => r.getAttribute("data-status"))).toEqual(["RUNNING", "RUNNING"]);
    const lists = () => fetch.mock.calls.filter((c) => !String(c[0]).includes("/stream")).length;
    const before = lists();
    push(`id: 10.5:4\nevent: execution\ndata: ${JSON.stringify(run("4", "CANCELLED", { steps_done: 2 }))}\n\n`);
    await waitFor(() => expect(screen.getAllByTestId("run-row")[1].getAttribute("data-status")).toBe("CANCELLED"));
    expect(screen.getAllByTestId("run-row")[0].getAttribute("data-status")).toBe("RUNNING");
    expect(screen.getByText("2/2")).toBeTruthy();
    expect(lists()).toBe(before);
  });

  it("moves a run's progress as its steps exit, never back", async () => {
    const at = (s: number) => `2026-01-01T00:00:0${s}Z`;
    const { push } = serve({ items: [run("4", "RUNNING", { steps_done: 0, steps_total: 3, updated_at: at(1) })], limit: 50, offset: 0, next: null });
    show(VIEWER);
    await screen.findByText("0/3");
    const step = (done: number, s: number) =>
      push(`id: ${s}.0:4\nevent: execution\ndata: ${JSON.stringify(run("4", "RUNNING", { steps_done: done, steps_total: 3, updated_at: at(s) }))}\n\n`);
    step(1, 2);
    await screen.findByText("1/3");
    step(2, 3);
    await screen.findByText("2/3");
    expect((screen.getByTitle("2 of 3 steps done").querySelector("progress") as HTMLProgressElement).value).toBe(2);
    step(1, 2); // a replayed older version, then a new run: once that shows, both were read
    push(`id: 5.0:5\nevent: execution\ndata: ${JSON.stringify(run("5", "RUNNING", { steps_done: 0, steps_total: 4 }))}\n\n`);
    await screen.findByText("0/4");
    expect(screen.getByText("2/3")).toBeTruthy();
    step(3, 4);
    await screen.findByText("3/3");
  });

  it("says what a running run waits on: a retry timer, its attempt and its error", async () => {
    const waiting = {
      kind: "policy_retry", step: "flaky", index: null, due_at: new Date(Date.now() + 552_500).toISOString(),
      attempt: 2, attempts: 3, error: { message: "ValueError: boom" }, task: null, worker: "w-1", pool: "default",
      approval_id: null, command_id: "5", undoes: null, count: 1,
    };
    serve({ items: [run("1", "RUNNING", { waiting }), run("2", "COMPLETED")], limit: 50, offset: 0, next: null });
    show(VIEWER);
    const shown = await screen.findByTestId("run-waiting");
    expect(shown.textContent).toMatch(/^step 'flaky' retrying in 9m 1[12]s, attempt 2 of 3, after: ValueError: boom$/);
    expect(screen.getAllByTestId("run-waiting")).toHaveLength(1);
  });

  it("offers checkboxes and bulk actions to an operator, none to a viewer", async () => {
    serve({ items: [run("1", "FAILED")], limit: 50, offset: 0, next: null });
    const view = show(VIEWER);
    await screen.findByText("user:ada");
    expect(screen.queryByRole("checkbox")).toBeNull();
    expect(screen.queryByText("Cancel selected")).toBeNull();
    expect(screen.queryByText(/Retry failed/)).toBeNull();
    view.unmount();
    show(OPERATOR);
    fireEvent.click(await screen.findByRole("checkbox", { name: "select 1" }));
    expect(screen.getByText("Cancel selected")).toBeTruthy();
    expect(screen.getByText("Retry failed/cancelled (1)")).toBeTruthy();
  });

  it("reports each run's answer to a bulk cancel, a 409 beside the others", async () => {
    const stream = controlledStream();
    const list: ExecutionList = { items: [run("1"), run("2", "COMPLETED")], limit: 50, offset: 0, next: null };
    vi.spyOn(globalThis, "fetch").mockImplementation(async (input) => {
      const url = String(input);
      if (url.startsWith("/api/executions/stream")) return stream.response;
      if (url === "/api/executions/1/cancel") return new Response(JSON.stringify({ execution_id: "1", status: "RUNNING" }), { status: 200 });
      if (url === "/api/executions/2/cancel")
        return new Response(JSON.stringify({ code: "already_terminal", message: "execution 2 is COMPLETED" }), { status: 409 });
      return new Response(JSON.stringify(list), { status: 200 });
    });
    show(OPERATOR);
    fireEvent.click(await screen.findByRole("checkbox", { name: "select 1" }));
    fireEvent.click(screen.getByRole("checkbox", { name: "select 2" }));
    fireEvent.click(screen.getByText("Cancel selected"));
    const results = await screen.findByTestId("bulk-results");
    expect(results.textContent).toContain("1: cancel asked (RUNNING)");
    expect(results.textContent).toContain("2: 409 already_terminal: execution 2 is COMPLETED");
  });
});
