import { fireEvent, screen, waitFor, within } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";
import { mockApi, renderWithClient, who } from "../testing/mockApi";
import { ApprovalsPage } from "./ApprovalsPage";
import { followApprovals } from "./live";
import { left } from "./Countdown";
import type { ApprovalItem, ApprovalOut } from "./types";

const item: ApprovalItem = {
  approval_id: "77", execution_id: "12", path: "examples/approval", step: "refund", run: 1,
  status: "pending", risk: "high", approvers: ["role:finance", "user:alice", "user:bob"], quorum: 2,
  approved: 1, expires_at: new Date(Date.now() + 3600_000 + 5000).toISOString(),
  requested_at: null, decided_at: null, started_by: "user:runner", digest: "d",
};
const detail: ApprovalOut = {
  ...item, kind: "http", policy: null, allow_self_approval: false, outcome: null,
  calls: [{ index: -1, input: { url: "http://refunds/refunds", headers: { Authorization: "[REDACTED]" } } }],
  votes: [{ identity: "user:bob", decision: "approve", reason: "checked the order", at: null }],
};
const PENDING = "GET /api/approvals?status=pending";

afterEach(() => vi.unstubAllGlobals());

describe("ApprovalsPage", () => {
  it("shows what the tool will do, the risk, who may decide, the votes and the time left", async () => {
    mockApi({ [PENDING]: { body: { items: [item], limit: 100, next: null } }, "GET /api/approvals/77": { body: detail } });
    renderWithClient(<ApprovalsPage who={who("approver", { approve: true })} />);
    const card = await screen.findByTestId("approval");
    await waitFor(() => expect(within(card).getByTestId("preview").textContent).toContain("http://refunds/refunds"));
    expect(within(card).getByTestId("preview").textContent).toContain("[REDACTED]");
    expect(within(card).getByTestId("risk").textContent).toBe("high risk");
    expect(within(card).getByTestId("approvers").textContent).toContain("role:finance, user:alice, user:bob");
    expect(within(card).getByTestId("votes").textContent).toContain("1 of 2 approvals");
    expect(within(card).getByTestId("votes").textContent).toContain("user:bob approved: checked the order");
    expect(within(card).getByTestId("time-left").textContent).toMatch(/^1 h 0 min left$/);
    expect(within(card).getByRole("button", { name: "Approve" })).toBeTruthy();
  });

  it("sends the decision with its reason", async () => {
    const calls = mockApi({
      [PENDING]: { body: { items: [item], limit: 100, next: null } },
      "GET /api/approvals/77": { body: detail },
      "POST /api/approvals/77/decision": { body: { ...detail, status: "granted" } },
    });
    renderWithClient(<ApprovalsPage who={who("approver", { approve: true })} />);
    const card = await screen.findByTestId("approval");
    fireEvent.change(within(card).getByPlaceholderText("reason"), { target: { value: "ok by finance" } });
    fireEvent.click(within(card).getByRole("button", { name: "Approve" }));
    await waitFor(() => expect(calls.some((c) => c.method === "POST")).toBe(true));
    const sent = calls.find((c) => c.method === "POST")!;
    expect(sent.url).toBe("/api/approvals/77/decision");
    expect(sent.body).toEqual({ decision: "approve", reason: "ok by finance" });
  });

  it.each([
    [403, "self_approval", "user:runner started run 12 and may not approve it"],
    [403, "not_an_approver", "user:carol is not among the approvers of approval 77"],
    [409, "approval_closed", "approval 77 is granted"],
    [409, "already_voted", "user:alice already voted on approval 77"],
  ])("shows a %i %s refusal with the API's message", async (status, code, message) => {
    mockApi({
      [PENDING]: { body: { items: [item], limit: 100, next: null } },
      "GET /api/approvals/77": { body: detail },
      "POST /api/approvals/77/decision": { status, body: { code, message } },
    });
    renderWithClient(<ApprovalsPage who={who("approver", { approve: true })} />);
    const card = await screen.findByTestId("approval");
    fireEvent.click(within(card).getByRole("button", { name: "Deny" }));
    const refusal = await within(card).findByTestId("refusal");
    expect(refusal.textContent).toBe(`${message} (${code})`);
  });

  it("shows past the first page of pending approvals on More, and no More after the last", async () => {
    const second = { ...item, approval_id: "78", step: "payout" };
    const calls = mockApi({
      [PENDING]: { body: { items: [item], limit: 1, next: "77" } },
      [`${PENDING}&after=77`]: { body: { items: [second], limit: 1, next: null } },
      "GET /api/approvals/77": { body: detail },
      "GET /api/approvals/78": { body: { ...detail, ...second } },
    });
    renderWithClient(<ApprovalsPage who={who("approver", { approve: true })} />);
    expect(await screen.findAllByTestId("approval")).toHaveLength(1);
    fireEvent.click(await screen.findByRole("button", { name: "More" }));
    await waitFor(() => expect(screen.getAllByTestId("approval")).toHaveLength(2));
    expect(calls.some((c) => `GET ${c.url}` === `${PENDING}&after=77`)).toBe(true);
    expect(screen.queryByRole("button", { name: "More" })).toBeNull();
  });

  it("offers no decision to a role that may not decide", async () => {
    mockApi({ [PENDING]: { body: { items: [item], limit: 100, next: null } }, "GET /api/approvals/77": { body: detail } });
    renderWithClient(<ApprovalsPage who={who("viewer")} />);
    const card = await screen.findByTestId("approval");
    await waitFor(() => expect(within(card).getByTestId("preview").textContent).toContain("refunds"));
    expect(within(card).queryByRole("button", { name: "Approve" })).toBeNull();
    expect(within(card).queryByRole("button", { name: "Deny" })).toBeNull();
    expect(screen.getByText(/may not decide approvals/)).toBeTruthy();
  });

  it("lists the decided approvals in the history tab, asked with decided=true", async () => {
    const calls = mockApi({
      [PENDING]: { body: { items: [], limit: 100, next: null } },
      "GET /api/approvals?decided=true": {
        body: { items: [{ ...item, status: "denied", decided_at: "2026-01-02T03:04:05+00:00" }], limit: 100, next: null },
      },
    });
    renderWithClient(<ApprovalsPage who={who("viewer")} />);
    expect(await screen.findByText("Nothing waits for a decision.")).toBeTruthy();
    fireEvent.click(screen.getByRole("tab", { name: "History" }));
    const row = await screen.findByTestId("history-row");
    expect(row.dataset.status).toBe("denied");
    expect(row.textContent).toContain("examples/approval");
    expect(calls.map((c) => c.url)).toContain("/api/approvals?decided=true");
  });
});

describe("left", () => {
  it("counts down to the expiry and says when it passed", () => {
    const now = Date.parse("2026-01-01T00:00:00Z");
    expect(left("2026-01-01T00:00:42Z", now)).toBe("42 s left");
    expect(left("2026-01-01T00:02:05Z", now)).toBe("2 min 5 s left");
    expect(left("2026-01-01T03:10:00Z", now)).toBe("3 h 10 min left");
    expect(left("2025-12-31T23:59:59Z", now)).toBe("expired");
  });
});

/** A text/event-stream reply the test writes into, as the server would. */
function controlledStream() {
  let push: (text: string) => void = () => {};
  const body = new ReadableStream<Uint8Array>({
    start(c) {
      push = (text) => c.enqueue(new TextEncoder().encode(text));
    },
  });
  return { response: new Response(body, { status: 200, headers: { "Content-Type": "text/event-stream" } }), push: (t: string) => push(t) };
}

const RUN_CHANGED = `id: 5.5:12\nevent: execution\ndata: ${JSON.stringify({ execution_id: "12", status: "RUNNING" })}\n\n`;

describe("the pending list, live", () => {
  it("is read again when the runs stream says a run changed, not on a timer", async () => {
    const stream = controlledStream();
    let pending = [item];
    const reads: string[] = [];
    vi.stubGlobal(
      "fetch",
      vi.fn(async (url: string) => {
        reads.push(url);
        if (url.startsWith("/api/executions/stream")) return stream.response;
        if (url === "/api/approvals?status=pending") return new Response(JSON.stringify({ items: pending, limit: 100, next: null }));
        return new Response(JSON.stringify(detail));
      }),
    );
    renderWithClient(<ApprovalsPage who={who("approver", { approve: true })} />);
    await screen.findByTestId("approval");
    await waitFor(() => expect(reads.some((u) => u.startsWith("/api/executions/stream"))).toBe(true));
    const lists = () => reads.filter((u) => u === "/api/approvals?status=pending").length;
    expect(lists()).toBe(1);
    pending = []; // granted elsewhere: its run moved on the stream
    stream.push(RUN_CHANGED);
    await screen.findByText("Nothing waits for a decision.");
    expect(lists()).toBe(2);
  });

  it("reads once for a burst of changes", async () => {
    vi.useFakeTimers();
    const stream = controlledStream();
    vi.stubGlobal("fetch", vi.fn(async () => stream.response));
    const changed = vi.fn();
    const stop = followApprovals(changed, 1000);
    try {
      await vi.advanceTimersByTimeAsync(0); // the stream opens
      stream.push(RUN_CHANGED.repeat(50));
      await vi.advanceTimersByTimeAsync(10);
      expect(changed).toHaveBeenCalledTimes(1);
      stream.push(RUN_CHANGED);
      await vi.advanceTimersByTimeAsync(500);
      expect(changed).toHaveBeenCalledTimes(1); // within the gap: waits for its end
      await vi.advanceTimersByTimeAsync(600);
      expect(changed).toHaveBeenCalledTimes(2);
    } finally {
      stop();
      vi.useRealTimers();
    }
  });
});
