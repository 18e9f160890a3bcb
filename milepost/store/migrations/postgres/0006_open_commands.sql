-- 6: the command indexes hold the open commands only (queued, claimed). A claim moved a
-- command's entries from the queued part of each index to the claimed part, and its
-- settlement moved them again: W1 wrote 11.2 WAL pages a step, 8.7 before claims were
-- events; 8.8 with these. Statements name the statuses as literals (`store.sql.OPEN`),
-- so the planner can prove they match an index's condition.
DROP INDEX command_queue;
CREATE INDEX command_queue ON command (created_at, command_id) WHERE status = 'queued';
DROP INDEX command_open;
CREATE INDEX command_open ON command (status, execution_id) WHERE status IN ('queued', 'claimed');
