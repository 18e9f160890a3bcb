// GET /api/workers (milepost/api/schemas_workers.py).

export interface Running {
  command_id: string;
  execution_id: string;
  step: string;
}

export interface Worker {
  name: string;
  worker_key: string;
  kind: "worker" | "embedded";
  pools: string[];
  host: string;
  pid: number | null;
  version: string;
  started_at: string | null;
  last_seen: string | null;
  ttl: number;
  status: "live" | "lost";
  lost_at: string | null;
  running: Running[];
}

export interface PoolWithoutWorker {
  pool: string;
  commands: number;
  steps: string[];
  message: string;
}

export interface WorkerList {
  items: Worker[];
  without_worker: PoolWithoutWorker[];
}
