-- 5: approvals (issue 10) and who holds a token.
-- approval: one row per approval request, a projection of the log like command
-- (store/approvals.py): approval.requested inserts it, approval.decided adds a vote,
-- granted/denied/expired/invalidated close it, a cancelled step or an ended run cancels it.
-- JSON is TEXT, as everywhere else. Nothing to backfill: before this version no engine
-- wrote approval.requested.
CREATE TABLE approval (
    approval_id INTEGER PRIMARY KEY,
    execution_id INTEGER NOT NULL,
    step TEXT NOT NULL,
    run INTEGER NOT NULL,
    status TEXT NOT NULL,
    risk TEXT NOT NULL,
    approvers TEXT NOT NULL,
    quorum INTEGER NOT NULL,
    expires_at REAL,
    requested_at REAL NOT NULL,
    decided_at REAL,
    started_by TEXT,
    digest TEXT NOT NULL,
    request TEXT NOT NULL,
    votes TEXT NOT NULL,
    outcome TEXT,
    path TEXT NOT NULL
);
CREATE INDEX approval_status ON approval (status, approval_id);
CREATE INDEX approval_execution ON approval (execution_id, status);
-- a token may name its user (the identity of approval votes) and business roles
ALTER TABLE token ADD COLUMN user_name TEXT;
ALTER TABLE token ADD COLUMN approver_roles TEXT NOT NULL DEFAULT '[]';
