// The shapes of the API replies the UI reads (milepost/api/schemas*.py).

export interface Whoami {
  role: string;
  name: string | null;
  user: string | null;
  may: { cancel: boolean; execute: boolean; act: boolean; approve: boolean };
}

/** One thing a run waits on now (`core/waiting.py`): the same in every read. `due_at` is
 * absolute; the page says how far off it is. */
export interface Wait {
  kind: string;
  step: string | null;
  index: number | null;
  due_at: string | null;
  attempt: number | null;
  attempts: number | null;
  error: { message?: string; kind?: string } | null;
  task: string | null;
  worker: string | null;
  pool: string | null;
  approval_id: string | null;
  command_id: string | null;
  undoes: string | null;
  count: number;
}

export interface ExecutionItem {
  execution_id: string;
  path: string;
  version: number | null;
  status: string;
  created_at: string | null;
  updated_at: string | null;
  parent_execution_id: string | null;
  ended_at: string | null;
  duration_s: number | null;
  started_by?: string | null;
  steps_done?: number | null;
  steps_total?: number | null;
  /** In the list: what a running run waits on first. */
  waiting?: Wait | null;
}

export interface ExecutionList {
  items: ExecutionItem[];
  limit: number;
  offset: number;
  next?: string | null;
}

export interface StepSummary {
  status: string;
  runs: number;
}

export interface ExecutionOut extends ExecutionItem {
  error: Record<string, unknown> | null;
  /** Where its log ended as the reply was made: its stream is followed from there. */
  last_seq?: number;
  steps: Record<string, StepSummary>;
  waits?: Wait[];
}

export interface Iterations {
  total: number;
  done: number;
  running: number;
  failed: number;
}

export interface GraphNode {
  id: string;
  desc: string | null;
  kind: string;
  tasks: number;
  loop: boolean;
  status: string;
  runs: number;
  iterations: Iterations | null;
  /** A teardown step (`executor.spec.teardown`): it runs once as the run ends. */
  teardown?: boolean;
  wait?: Wait | null;
}

export interface GraphEdge {
  id: string;
  source: string;
  target: string;
  kind: string;
  conditional: boolean;
}

export interface RunGraph {
  execution_id: string;
  status: string;
  entry_step: string;
  nodes: GraphNode[];
  edges: GraphEdge[];
}

export interface EventOut {
  event_id: string;
  seq: number;
  event_type: string;
  step: string | null;
  status: string | null;
  created_at: string | null;
  worker_id: string | null;
}

export interface EventPage {
  events: EventOut[];
  next: number | null;
  last_seq: number;
  status: string;
}
