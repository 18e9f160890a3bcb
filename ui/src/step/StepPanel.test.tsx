import { QueryClient, QueryClientProvider } from "@tanstack/react-query";
import { fireEvent, render, screen, waitFor } from "@testing-library/react";
import type { ReactNode } from "react";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { Whoami } from "../api/types";
import { DiagnosisBanner } from "../run/DiagnosisBanner";
import { StepPanel } from "./StepPanel";
import type { Attempt, Described, Diagnosis, StepDetail } from "./types";

const OPERATOR: Whoami = { role: "operator", name: "op", user: null, may: { cancel: true, execute: true, act: true, approve: false } };
const VIEWER: Whoami = { role: "viewer", name: "v", user: null, may: { cancel: false, execute: false, act: false, approve: false } };

function attempt(n: number, status: string, extra: Partial<Attempt> = {}): Attempt {
  return {
    command_id: `10${n}`, run: 1, index: -1, attempt: n, status, worker: `worker-${n}`,
    started_at: "2026-01-02T03:04:05.000+00:00", ended_at: "2026-01-02T03:04:06.500+00:00",
    duration_s: 1.5, error: null, output: null, idempotency_key: `key-${n}`, child_execution_id: null, ...extra,
  };
}

function step(extra: Partial<StepDetail> = {}): StepDetail {
  return {
    status: "FAILED", runs: 1, result: null, started_at: null, ended_at: null, duration_s: 2,
    worker: "worker-2", input: { n: 1, password: "***" }, attempts_total: 2,
    attempts: [attempt(1, "FAILED"), attempt(2, "FAILED")], ...extra,
  };
}

function run(status: string, s: StepDetail): Described {
  return { execution_id: "42", status, parent_execution_id: null, steps: { boom: s } };
}

type Reply = { status?: number; body: unknown };
let replies: Record<string, Reply>;
let calls: { method: string; url: string; body: unknown }[];

beforeEach(() => {
  replies = { "/api/executions/42/logs": { body: { execution_id: "42", status: "RUNNING", entries: [], next: 0 } } };
  calls = [];
  vi.stubGlobal("fetch", async (url: string, init: RequestInit = {}) => {
    const path = url.split("?")[0];
    calls.push({ method: init.method ?? "GET", url, body: init.body ? JSON.parse(String(init.body)) : undefined });
    const reply = replies[`${init.method ?? "GET"} ${path}`] ?? replies[path];
    if (!reply) return new Response(JSON.stringify({ code: "not_found", message: `no ${path}` }), { status: 404 });
    return new Response(JSON.stringify(reply.body), { status: reply.status ?? 200 });
  });
});
afterEach(() => vi.unstubAllGlobals());

function wrap(node: ReactNode) {
  const client = new QueryClient({ defaultOptions: { queries: { retry: false } } });
  render(<QueryClientProvider client={client}>{node}</QueryClientProvider>);
  return client;
}

function describeAs(d: Described) {
  replies["/api/executions/42/describe"] = { body: d };
}

describe("the step panel", () => {
  it("lists each attempt with its status, worker, times and idempotency key", async () => {
    describeAs(run("RUNNING", step()));
    wrap(<StepPanel id="42" step="boom" who={VIEWER} onClose={() => {}} />);
    const rows = await screen.findAllByTestId("attempt-row");
    expect(rows).toHaveLength(2);
    expect(rows.map((r) => r.dataset.status)).toEqual(["FAILED", "FAILED"]);
    expect(rows[1].textContent).toContain("worker-2");
    expect(rows[1].textContent).toContain("key-2");
    expect(rows[1].textContent).toContain("1.5 s");
    expect(rows[1].textContent).toContain("03:04:05.000"); // start and end, to the millisecond
    expect(rows[1].textContent).toContain("03:04:06.500");
    expect(screen.getByTestId("step-input").textContent).toContain('"password": "***"');
  });

  it("shows the error with the line of code it failed on, and links the child run", async () => {
    const error = { kind: "exception", message: "ValueError: first try", line: 3, code_line: 'raise ValueError("first try")' };
    describeAs(run("RUNNING", step({ error, attempts: [attempt(1, "FAILED", { error, child_execution_id: "77" })], attempts_total: 1 })));
    wrap(<StepPanel id="42" step="boom" who={VIEWER} onClose={() => {}} />);
    expect((await screen.findByTestId("step-error")).textContent).toContain("ValueError: first try");
    expect(screen.getByTestId("step-error-line").textContent).toBe('line 3: raise ValueError("first try")');
    expect(screen.getByTestId("child-77").getAttribute("href")).toBe("/ui/runs/77");
  });

  it("reads a result kept by reference only when asked", async () => {
    const result = { reference: { uri: "milepost://results/42/9001", size: 300000 } };
    describeAs(run("COMPLETED", step({ status: "COMPLETED", result })));
    replies["/api/executions/42/results/9001"] = { body: { command_id: "101", result: { rows: ["big"] } } };
    wrap(<StepPanel id="42" step="boom" who={VIEWER} onClose={() => {}} />);
    const button = await screen.findByTestId("load-result");
    expect(button.textContent).toContain("300,000 bytes");
    expect(calls.some((c) => c.url.includes("/results/"))).toBe(false);
    fireEvent.click(button);
    const shown = await screen.findByTestId("step-result");
    expect(JSON.parse(shown.textContent ?? "")).toEqual({ rows: ["big"] });
  });

  it("shows another run's reference as it is, never reading it", async () => {
    const result = { reference: { uri: "milepost://results/43/9001", size: 1 } };
    describeAs(run("COMPLETED", step({ status: "COMPLETED", result })));
    wrap(<StepPanel id="42" step="boom" who={VIEWER} onClose={() => {}} />);
    expect((await screen.findByTestId("step-result")).textContent).toContain("results/43/9001");
    expect(screen.queryByTestId("load-result")).toBeNull();
  });

  it("offers a viewer no action", async () => {
    describeAs(run("RUNNING", step()));
    wrap(<StepPanel id="42" step="boom" who={VIEWER} onClose={() => {}} />);
    await screen.findAllByTestId("attempt-row");
    expect(screen.queryByTestId("step-actions")).toBeNull();
    expect(screen.queryByTestId("retry")).toBeNull();
    expect(screen.queryByTestId("skip")).toBeNull();
    expect(screen.queryByTestId("restart")).toBeNull();
  });

  it("offers an operator retry and skip on a running run, and shows the API's refusal", async () => {
    describeAs(run("RUNNING", step()));
    replies["POST /api/executions/42/steps/boom/retry"] = {
      status: 409,
      body: { code: "nothing_to_retry", message: "step 'boom' has no attempt that failed and waits" },
    };
    wrap(<StepPanel id="42" step="boom" who={OPERATOR} onClose={() => {}} />);
    fireEvent.click(await screen.findByTestId("retry"));
    expect((await screen.findByTestId("action-error")).textContent).toBe(
      "409 nothing_to_retry: step 'boom' has no attempt that failed and waits",
    );
    expect(screen.queryByTestId("restart")).toBeNull(); // the run still goes: nothing to restart
  });

  it("skips with the result given as JSON, and names a result that is not JSON", async () => {
    describeAs(run("RUNNING", step()));
    replies["POST /api/executions/42/steps/boom/skip"] = { body: { execution_id: "42", step: "boom", action: "skip" } };
    wrap(<StepPanel id="42" step="boom" who={OPERATOR} onClose={() => {}} />);
    fireEvent.click(await screen.findByTestId("skip"));
    fireEvent.change(screen.getByTestId("skip-result"), { target: { value: "{oops" } });
    fireEvent.click(screen.getByTestId("skip-confirm"));
    expect((await screen.findByTestId("action-error")).textContent).toMatch(/^result: not JSON/);
    expect(calls.some((c) => c.method === "POST")).toBe(false);
    fireEvent.change(screen.getByTestId("skip-result"), { target: { value: '{"rows": 3}' } });
    fireEvent.click(screen.getByTestId("skip-confirm"));
    await waitFor(() => expect(calls.find((c) => c.method === "POST")?.body).toEqual({ result: { rows: 3 } }));
  });

  it("on an ended run offers a restart from the step, and opens the new run", async () => {
    describeAs(run("FAILED", step()));
    replies["POST /api/executions/42/restart"] = { body: { execution_id: "99", restarted_from: "42", from_step: "boom" } };
    wrap(<StepPanel id="42" step="boom" who={OPERATOR} onClose={() => {}} />);
    fireEvent.click(await screen.findByTestId("restart"));
    await waitFor(() => expect(window.location.pathname).toBe("/ui/runs/99"));
    expect(calls.find((c) => c.method === "POST")?.body).toEqual({ from_step: "boom" });
    expect(screen.queryByTestId("retry")).toBeNull(); // an ended run is never moved again
    expect(screen.queryByTestId("skip")).toBeNull();
  });
});

describe("the diagnosis banner", () => {
  function diagnose(status: string, kind: string, message: string) {
    const d: Diagnosis = { execution_id: "42", status, findings: [{ kind, step: "boom", message, fields: {} }] };
    replies["/api/executions/42/diagnosis"] = { body: d };
  }

  it("says why a run that is not moving waits", async () => {
    diagnose("RUNNING", "no_live_worker", "no live worker of pool gpu");
    wrap(<DiagnosisBanner id="42" status="RUNNING" />);
    const banner = await screen.findByTestId("diagnosis");
    expect(banner.textContent).toBe("Not moving at step boom: no live worker of pool gpu");
  });

  it("says nothing while the run moves", async () => {
    diagnose("RUNNING", "claimed", "worker-1 runs it");
    const client = wrap(<DiagnosisBanner id="42" status="RUNNING" />);
    await waitFor(() => expect(client.getQueryState(["run", "42", "diagnosis"])?.status).toBe("success"));
    expect(screen.queryByTestId("diagnosis")).toBeNull();
  });

  it("shows a failed run's first error", async () => {
    diagnose("FAILED", "failed", "step boom failed: ValueError (line 3)");
    wrap(<DiagnosisBanner id="42" status="FAILED" />);
    expect((await screen.findByTestId("diagnosis")).textContent).toContain("Failed at step boom");
  });
});
