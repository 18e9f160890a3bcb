-- 9: restarts (issue 12). execution.restarted_from: the FAILED or CANCELLED run a run
-- restarts (from its execution.started), so the old run lists its restarts without a
-- write to its ended log. Nothing to backfill: no run before this version restarted one.
ALTER TABLE execution ADD COLUMN restarted_from BIGINT;
CREATE INDEX execution_restarted_from ON execution (restarted_from);
