import { describe, expect, it } from "vitest";
import { ApiError } from "../api/client";
import { refused } from "./refused";

describe("whoami's failure", () => {
  it("forgets the token when the server refuses it", () => {
    expect(refused(new ApiError(401, "unauthorized", "bad token"))).toBe(true);
    expect(refused(new ApiError(403, "forbidden", "revoked"))).toBe(true);
  });

  it("keeps it when the request was cut short or the server failed", () => {
    expect(refused(new DOMException("The user aborted a request.", "AbortError"))).toBe(false);
    expect(refused(new TypeError("Failed to fetch"))).toBe(false);
    expect(refused(new ApiError(503, "unavailable", "starting"))).toBe(false);
  });
});
