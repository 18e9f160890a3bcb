-- 2: what the server needs: cancel flag, worker pools, credentials, API tokens
ALTER TABLE execution ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
-- the projection follows the log: executions already asked to cancel
UPDATE execution SET cancel_requested = 1 WHERE execution_id IN
    (SELECT execution_id FROM event WHERE event_type = 'execution.cancel_requested');
ALTER TABLE command ADD COLUMN pool TEXT NOT NULL DEFAULT 'default';
CREATE INDEX command_queue ON command (status, created_at, command_id);
CREATE TABLE credential (
    name TEXT PRIMARY KEY,
    type TEXT NOT NULL,
    ciphertext BLOB NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE token (
    token_hash TEXT PRIMARY KEY,
    role TEXT NOT NULL,
    name TEXT,
    created_at REAL NOT NULL
);
