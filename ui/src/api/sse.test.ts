import { describe, expect, it } from "vitest";
import { SseParser } from "./sse";

describe("SseParser", () => {
  it("yields messages split across chunks and skips keepalive comments", () => {
    const p = new SseParser();
    expect(p.feed(": keepalive\n\nid: 7\nevent: command.comp")).toEqual([]);
    expect(p.feed('leted\ndata: {"seq":7}\n\nid: 8\r\nevent: end\r\ndata: {}\r\n\r\n')).toEqual([
      { id: "7", event: "command.completed", data: '{"seq":7}' },
      { id: "8", event: "end", data: "{}" },
    ]);
  });
});
