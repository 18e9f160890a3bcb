-- 14: who started each run from before migration 13, read from its execution.started event
-- (the runs list showed none for them). A payload big enough to live in the result store
-- has no `context` inline: such a run keeps none.
UPDATE execution SET started_by = json_extract(e.result, '$.context.started_by')
FROM event e
WHERE e.execution_id = execution.execution_id AND e.event_type = 'execution.started'
  AND execution.started_by IS NULL AND json_valid(e.result)
  AND json_extract(e.result, '$.context.started_by') IS NOT NULL;
