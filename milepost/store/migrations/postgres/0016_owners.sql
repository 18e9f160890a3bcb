-- 16: whose machine ids and worker names are (issue 33). owner: the token (its hash) a worker
-- leased it with through its server; NULL for a process on the database itself (a server,
-- `milepost run`, a CLI command). leased_at: when its holder took it (NULL: before this
-- migration). A client's event id is taken only on the poster's own machine id, or from
-- before that id's lease began (`engine.machine.IdSpaces`); a given-back lease keeps its
-- row (its ids stay its holder's for a while) instead of being deleted.
ALTER TABLE machine_lease ADD COLUMN owner TEXT;
ALTER TABLE machine_lease ADD COLUMN leased_at DOUBLE PRECISION;
-- worker.owner: the token a worker checked in with; while its row is live, its name (and
-- process key) are that token's: another token checking in under them is refused (409).
ALTER TABLE worker ADD COLUMN owner TEXT;
