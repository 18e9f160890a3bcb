-- 17: nothing to change on SQLite. PostgreSQL replaces its claim check with one that also
-- fences the engine's own settlements; SQLite's store checks them itself (its IMMEDIATE
-- transaction holds the whole database).
SELECT 1;
