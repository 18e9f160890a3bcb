// jsdom has no layout: ResizeObserver is what @xyflow/react and TanStack Virtual ask for.
class NoResize {
  observe() {}
  unobserve() {}
  disconnect() {}
}
(globalThis as unknown as { ResizeObserver: unknown }).ResizeObserver ??= NoResize;

import { cleanup } from "@testing-library/react";
import { afterEach } from "vitest";

afterEach(cleanup);
