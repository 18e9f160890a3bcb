-- 9: a run's children by parent (issue 11): a cancel reaches the running children of a run
-- through this index instead of paging through every RUNNING execution. Partial: only
-- the rows a cancel looks for (running, with a parent), so it stays small.
CREATE INDEX execution_running_children ON execution (parent_execution_id)
    WHERE status = 'RUNNING' AND parent_execution_id IS NOT NULL;
