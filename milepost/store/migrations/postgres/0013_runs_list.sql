-- 13: the web UI's runs list (issue 14). execution.started_by: who started the run (from
-- its execution.started), shown in the list without reading the log. Runs started before
-- this version are backfilled by migration 14.
ALTER TABLE execution ADD COLUMN started_by TEXT;
-- Keyset pages of the list, newest first: (created_at, execution_id) < the cursor, alone
-- or after a playbook's or a status's equality, each one index range (no OFFSET scan).
CREATE INDEX execution_created ON execution (created_at, execution_id);
CREATE INDEX execution_path_created ON execution (path, created_at, execution_id);
-- A status's pages: migration 1's execution_status again, with the id (replaced, not
-- doubled: one index per write either way).
DROP INDEX execution_status;
CREATE INDEX execution_status ON execution (status, created_at, execution_id);
-- The change stream (GET /api/executions/stream) reads rows past (updated_at, execution_id).
CREATE INDEX execution_updated ON execution (updated_at, execution_id);
