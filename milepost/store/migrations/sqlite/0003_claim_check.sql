-- 3: nothing to change on SQLite. PostgreSQL gets a function that checks reported claims
-- in an append's transaction; SQLite's store checks them itself (its IMMEDIATE
-- transaction holds the whole database).
SELECT 1;
