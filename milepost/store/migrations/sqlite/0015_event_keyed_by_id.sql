-- 15: the log keyed by its event ids. The surrogate `id` (AUTOINCREMENT) was read by no
-- statement, yet because of it every append wrote, beside the table and its (execution_id,
-- seq) index, a UNIQUE index of event_id and a `sqlite_sequence` row. With event_id as the
-- rowid those two go: two of the ~11 pages a W1 step's commit wrote to the WAL
-- (BENCHMARKS.md, session 12). Copied in event_id order, so the copy appends to the new
-- b-tree; every read orders by (execution_id, seq) anyway.
CREATE TABLE event_keyed (
    event_id INTEGER PRIMARY KEY,
    execution_id INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    parent_event_id INTEGER,
    event_type TEXT NOT NULL,
    step TEXT,
    status TEXT,
    result TEXT,
    meta TEXT,
    worker_id TEXT,
    created_at REAL NOT NULL
);
INSERT INTO event_keyed (event_id, execution_id, seq, parent_event_id, event_type, step, status,
                         result, meta, worker_id, created_at)
SELECT event_id, execution_id, seq, parent_event_id, event_type, step, status, result, meta,
       worker_id, created_at FROM event ORDER BY event_id;
DROP TABLE event;
ALTER TABLE event_keyed RENAME TO event;
CREATE UNIQUE INDEX event_execution_seq ON event (execution_id, seq);
