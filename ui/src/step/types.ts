// The shapes of the step panel's reads (GET /api/executions/{id}/describe, /logs,
// /diagnosis, /results/{id}; milepost/api/schemas_reads.py, schemas_logs.py,
// schemas_diagnosis.py) and of the actions' replies (schemas_actions.py).

export interface StepError {
  kind?: string;
  message?: string;
  reason?: string;
  line?: number | null;
  code_line?: string | null;
  [field: string]: unknown;
}

export interface Attempt {
  command_id: string;
  run: number | null;
  index: number | null;
  attempt: number | null;
  status: string;
  worker: string | null;
  started_at: string | null;
  ended_at: string | null;
  duration_s: number | null;
  error: StepError | null;
  output: unknown;
  idempotency_key: string | null;
  child_execution_id: string | null;
}

export interface StepDetail {
  status: string;
  runs: number;
  result: unknown;
  started_at: string | null;
  ended_at: string | null;
  duration_s: number | null;
  worker: string | null;
  input: unknown;
  error?: StepError | null;
  attempts_total: number;
  attempts: Attempt[];
  usage?: unknown;
}

export interface Described {
  execution_id: string;
  status: string;
  parent_execution_id: string | null;
  steps: Record<string, StepDetail>;
}

export interface LogEntry {
  cursor: number;
  step: string;
  command_id: string;
  attempt: number;
  stream: "stdout" | "stderr" | "traceback";
  text: string;
  cut: number;
  created_at: string;
}

export interface LogsPage {
  execution_id: string;
  status: string;
  entries: LogEntry[];
  next: number;
}

export interface Finding {
  kind: string;
  step: string | null;
  message: string;
  fields: Record<string, unknown>;
}

export interface Diagnosis {
  execution_id: string;
  status: string;
  findings: Finding[];
}

export interface Started {
  execution_id: string;
}
