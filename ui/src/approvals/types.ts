// GET /api/approvals and /api/approvals/{id} (milepost/api/schemas.py, ApprovalItem/Out).

export interface ApprovalItem {
  approval_id: string;
  execution_id: string;
  path: string;
  step: string;
  run: number;
  status: string;
  risk: string;
  approvers: string[];
  quorum: number;
  approved: number;
  expires_at: string | null;
  requested_at: string | null;
  decided_at: string | null;
  started_by: string | null;
  digest: string;
}

export interface Vote {
  identity: string;
  decision: string;
  reason: string | null;
  at: string | null;
}

export interface ApprovalOut extends ApprovalItem {
  kind: string | null;
  /** What the step will do, rendered with secrets redacted by the server. */
  calls: { index: number; input: unknown; digest?: string }[];
  policy: string | null;
  allow_self_approval: boolean;
  votes: Vote[];
  outcome: Record<string, unknown> | null;
}

export interface ApprovalList {
  items: ApprovalItem[];
  limit: number;
  next: string | null;
}
