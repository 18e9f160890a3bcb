import { afterEach, describe, expect, it, vi } from "vitest";
import { follow } from "./stream";

function sse(body: string): Response {
  const bytes = new TextEncoder().encode(body);
  const stream = new ReadableStream<Uint8Array>({
    start(c) {
      c.enqueue(bytes);
      c.close();
    },
  });
  return new Response(stream, {
    status: 200,
    headers: { "Content-Type": "text/event-stream" },
  });
}

afterEach(() => {
  vi.restoreAllMocks();
  vi.useRealTimers();
});

describe("follow", () => {
  it("re-fetches once per burst of events and stops at `end`", async () => {
    const fetch = vi.spyOn(globalThis, "fetch").mockResolvedValue(
      sse('id: 1\nevent: step.enter\ndata: {}\n\n: keepalive\n\nid: 2\nevent: step.exit\ndata: {}\n\nevent: end\ndata: {}\n\n'),
    );
    const changed = vi.fn();
    const ended = new Promise<void>((resolve) => follow((after) => `/s?after=${after}`, changed, { onEnd: resolve }));
    await ended;
    await new Promise((r) => setTimeout(r, 50));
    expect(fetch).toHaveBeenCalledTimes(1);
    expect(fetch.mock.calls[0][0]).toBe("/s?after=0");
    expect(changed.mock.calls.length).toBeGreaterThanOrEqual(1);
    expect(changed.mock.calls.length).toBeLessThanOrEqual(2); // coalesced, not one per event
  });

  it("falls back to one re-fetch per interval when the server has no stream route", async () => {
    vi.spyOn(globalThis, "fetch").mockResolvedValue(new Response("{}", { status: 404 }));
    const changed = vi.fn();
    const stop = follow(() => "/s", changed, { pollMs: 20 });
    await new Promise((r) => setTimeout(r, 110));
    stop();
    const calls = changed.mock.calls.length;
    expect(calls).toBeGreaterThanOrEqual(2);
    expect(calls).toBeLessThanOrEqual(6);
    await new Promise((r) => setTimeout(r, 60));
    expect(changed.mock.calls.length).toBe(calls); // stopped: no timer left running
  });

  it("starts where the caller's read ended and re-fetches at most once per interval", async () => {
    // a live run: a message, the connection closes, another message on the resumed one
    const fetch = vi
      .spyOn(globalThis, "fetch")
      .mockResolvedValueOnce(sse("id: 301\nevent: step.exit\ndata: {}\n\n"))
      .mockResolvedValueOnce(sse("id: 302\nevent: step.exit\ndata: {}\n\nevent: end\ndata: {}\n\n"));
    const at: number[] = [];
    const ended = new Promise<void>((resolve) =>
      follow((after) => `/s?after=${after}`, () => at.push(Date.now()), {
        after: 300, minIntervalMs: 400, onEnd: resolve,
      }),
    );
    await ended;
    await new Promise((r) => setTimeout(r, 500));
    expect(fetch.mock.calls[0][0]).toBe("/s?after=300"); // not the 300 events it has
    expect(fetch.mock.calls[1][0]).toBe("/s?after=301"); // resumed after the last seen
    for (let i = 1; i < at.length; i++) expect(at[i] - at[i - 1]).toBeGreaterThanOrEqual(390);
  }, 10_000);
});
