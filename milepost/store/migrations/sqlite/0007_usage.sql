-- 7: usage per execution (issue 11, DSL 10.6).
-- execution_usage: a projection of the log like command (store/usage.py): each
-- command.completed / command.failed carrying payload key usage adds its tokens and cost
-- to the row of its execution and (provider, model); '' when the tool named none.
-- Per playbook is a sum over it joined with execution. Nothing to backfill: before this
-- version no report carried usage.
CREATE TABLE execution_usage (
    execution_id INTEGER NOT NULL,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cost REAL NOT NULL,
    PRIMARY KEY (execution_id, provider, model)
);
