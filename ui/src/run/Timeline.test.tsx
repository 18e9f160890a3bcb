import { render, screen } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { EventOut } from "../api/types";
import { Timeline } from "./Timeline";

function events(n: number): EventOut[] {
  const out: EventOut[] = new Array(n);
  for (let i = 0; i < n; i++) {
    out[i] = {
      event_id: String(i + 1), seq: i + 1, event_type: i % 2 ? "command.completed" : "command.issued",
      step: "each", status: null, created_at: null, worker_id: null,
    };
  }
  return out;
}

describe("Timeline", () => {
  // jsdom lays nothing out: the scroll area reports the height a browser would give it
  beforeEach(() => {
    vi.spyOn(HTMLElement.prototype, "getBoundingClientRect").mockReturnValue(
      { width: 800, height: 360, top: 0, left: 0, right: 800, bottom: 360, x: 0, y: 0, toJSON: () => ({}) } as DOMRect,
    );
    vi.spyOn(HTMLElement.prototype, "clientHeight", "get").mockReturnValue(360);
    vi.spyOn(HTMLElement.prototype, "clientWidth", "get").mockReturnValue(800);
  });
  afterEach(() => vi.restoreAllMocks());

  it("renders 100,000 events as a window of rows, not 100,000 DOM rows", async () => {
    render(<Timeline events={events(100_000)} height={360} />);
    const rows = await screen.findAllByTestId("event-row");
    expect(rows.length).toBeGreaterThan(5);
    expect(rows.length).toBeLessThan(100);
    expect(rows[0].textContent).toContain("command.issued");
    expect(screen.getByText(/Events \(100,000\)/)).toBeTruthy();
    // the scroll area is as tall as every row would be
    const inner = screen.getByTestId("timeline").firstElementChild as HTMLElement;
    expect(inner.style.height).toBe(`${100_000 * 26}px`);
  });
});
