import { screen, within } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";
import { mockApi, renderWithClient } from "../testing/mockApi";
import { WorkersPage } from "./WorkersPage";
import type { Worker } from "./types";

const worker = (name: string, over: Partial<Worker> = {}): Worker => ({
  name, worker_key: `${name}/k`, kind: "worker", pools: ["default"], host: "box-1", pid: 4242, version: "0.1.0",
  started_at: "2026-01-01T00:00:00+00:00", last_seen: "2026-01-01T00:01:00+00:00", ttl: 30, status: "live",
  lost_at: null, running: [], ...over,
});

afterEach(() => vi.unstubAllGlobals());

describe("WorkersPage", () => {
  it("shows live and lost workers with what each runs, and the pools no live worker serves", async () => {
    mockApi({
      "GET /api/workers": {
        body: {
          items: [
            worker("w1", { running: [{ command_id: "9", execution_id: "12", step: "fetch" }] }),
            worker("w2", { status: "lost", host: "box-2", pid: 7, pools: ["gpu"] }),
          ],
          without_worker: [{ pool: "gpu", commands: 3, steps: ["train"], message: "no live worker of pool gpu" }],
        },
      },
    });
    renderWithClient(<WorkersPage />);
    const rows = await screen.findAllByTestId("worker-row");
    expect(rows.map((r) => [r.dataset.name, r.dataset.status])).toEqual([["w1", "live"], ["w2", "lost"]]);
    expect(rows[0].textContent).toContain("box-1");
    expect(rows[0].textContent).toContain("4242");
    expect(rows[0].textContent).toContain("0.1.0");
    expect(within(rows[0]).getByTestId("running").textContent).toBe("fetch of run 12");
    expect(within(rows[1]).getByTestId("running").textContent).toBe("idle");
    expect(rows[1].textContent).toContain("gpu");
    const pool = screen.getByTestId("pool-without-worker");
    expect(pool.dataset.pool).toBe("gpu");
    expect(pool.textContent).toContain("3 queued command(s) of step(s) train");
  });

  it("says when no worker checked in and lists no pool when every queue is served", async () => {
    mockApi({ "GET /api/workers": { body: { items: [], without_worker: [] } } });
    renderWithClient(<WorkersPage />);
    expect(await screen.findByText("No worker has checked in.")).toBeTruthy();
    expect(screen.queryByTestId("without-worker")).toBeNull();
  });
});
