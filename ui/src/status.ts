// One colour per status, used by the graph, the list and the timeline.
export const STATUS_COLOURS: Record<string, string> = {
  PENDING: "#9aa5b1",
  RUNNING: "#2f80ed",
  COMPLETED: "#27ae60",
  FAILED: "#d64545",
  CANCELLED: "#8e6c8a",
  SKIPPED: "#c4c9cf",
  AWAITING_APPROVAL: "#e5a50a",
};

export function statusColour(status: string | null | undefined): string {
  return STATUS_COLOURS[status ?? "PENDING"] ?? "#9aa5b1";
}

export const TERMINAL = new Set(["COMPLETED", "FAILED", "CANCELLED"]);
