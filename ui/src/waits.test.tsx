import { render, screen } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import type { Wait } from "./api/types";
import { WaitBanner } from "./run/WaitBanner";
import { span, waitText } from "./waits";

const NOW = Date.parse("2026-03-01T12:00:00Z");
const at = (s: number) => new Date(NOW + s * 1000).toISOString();

export function wait(kind: string, extra: Partial<Wait> = {}): Wait {
  return {
    kind, step: "flaky", index: null, due_at: null, attempt: null, attempts: null, error: null, task: null,
    worker: null, pool: null, approval_id: null, command_id: null, undoes: null, count: 1, ...extra,
  };
}

describe("waitText", () => {
  it("says a retry's wait as core/waiting.text does, from the reader's clock", () => {
    const retry = wait("retry", { due_at: at(552), attempt: 2, attempts: 3, error: { message: "ValueError: boom" } });
    expect(waitText(retry, NOW)).toBe("retrying in 9m 12s, attempt 2 of 3, after: ValueError: boom");
    expect(waitText(retry, NOW + 552_000)).toBe("retrying now, attempt 2 of 3, after: ValueError: boom");
    const policy = wait("policy_retry", { due_at: at(30), attempt: 2, attempts: 5, task: "fetch", error: { message: "HTTP 503" } });
    expect(waitText(policy, NOW)).toBe("task 'fetch' retrying in 30s, attempt 2 of 5, after: HTTP 503");
  });

  it("names the other waits", () => {
    expect(waitText(wait("approval", { approval_id: "9", due_at: at(3600) }), NOW)).toBe(
      "waiting for approval 9, which expires in 1h 00m",
    );
    expect(waitText(wait("no_worker", { pool: "gpu", count: 3 }), NOW)).toBe(
      "queued in pool gpu, which no live worker serves (and 2 more)",
    );
    expect(waitText(wait("claimed", { worker: "w-1", attempt: 1 }), NOW)).toBe("running on w-1, attempt 1");
    expect(waitText(wait("cancel_grace", { step: null, due_at: at(12) }), NOW)).toBe(
      "cancel requested: the attempts still out are abandoned in 12s",
    );
  });

  it("writes spans as the CLI does", () => {
    expect([span(12), span(250), span(3 * 3600 + 300), span(2 * 86400 + 3600)]).toEqual(["12s", "4m 10s", "3h 05m", "2d 1h"]);
  });
});

describe("WaitBanner", () => {
  it("shows what holds the run back, not the work under way", () => {
    const due = new Date(Date.now() + 600_000).toISOString();
    render(
      <WaitBanner
        waits={[
          wait("policy_retry", { due_at: due, attempt: 2, attempts: 3, error: { message: "ValueError: boom" } }),
          wait("claimed", { step: "other", worker: "w-1" }),
        ]}
      />,
    );
    const shown = screen.getAllByTestId("wait");
    expect(shown).toHaveLength(1);
    expect(shown[0].dataset.kind).toBe("policy_retry");
    expect(shown[0].textContent).toMatch(/^Waiting step 'flaky' retrying in (10m 00s|9m 59s), attempt 2 of 3, after: ValueError: boom$/);
  });

  it("shows nothing when nothing holds the run back", () => {
    render(<WaitBanner waits={[wait("queued", { pool: "default" })]} />);
    expect(screen.queryByTestId("waits")).toBeNull();
  });
});
