-- 9: what attempts printed (issue 12, `milepost logs`).
-- attempt_log: per reported attempt and stream (stdout, stderr, traceback), the text its
-- worker captured, redacted and capped (cut: the bytes cut from its middle). Not state:
-- written by the engine beside the report it came with (the event's event_id), never in
-- the event log; log_id orders an execution's entries and is the cursor of a follower.
-- Nothing to backfill: before this version no output was kept.
CREATE TABLE attempt_log (
    log_id INTEGER PRIMARY KEY AUTOINCREMENT,
    execution_id INTEGER NOT NULL,
    step TEXT NOT NULL,
    command_id INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    event_id INTEGER NOT NULL,
    stream TEXT NOT NULL,
    text TEXT NOT NULL,
    cut INTEGER NOT NULL,
    created_at REAL NOT NULL,
    UNIQUE (event_id, stream)
);
CREATE INDEX attempt_log_execution ON attempt_log (execution_id, log_id);
