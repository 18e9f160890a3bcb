-- 9: the workers registry (issue 12): one row per worker process, written when it checks
-- in (its machine-id lease and each renewal) and by the embedded engine for its
-- in-process workers. worker_key names the process (a name may be reused); name is the
-- worker id its claims carry. The status is decided when read: lost once last_seen is
-- older than ttl; lost_at is when the reconciler noticed (it logs it once).
CREATE TABLE worker (
    worker_key TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    pool TEXT NOT NULL,
    kind TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER,
    version TEXT NOT NULL,
    started_at DOUBLE PRECISION NOT NULL,
    last_seen DOUBLE PRECISION NOT NULL,
    ttl DOUBLE PRECISION NOT NULL,
    lost_at DOUBLE PRECISION
);
