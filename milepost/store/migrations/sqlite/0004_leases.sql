-- 4: leases that keep writers apart.
-- machine_lease: the machine id (the 10 bits of a snowflake that name who made it) of each
-- live process that makes event ids: servers, workers and embedded runs each lease their
-- own, so two processes can never mint the same event id.
CREATE TABLE machine_lease (
    machine_id INTEGER PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at REAL NOT NULL
);
-- execution_driver: the one process that drives an execution in the embedded mode (its
-- orchestrator and in-process workers); another may take over only once the lease expired.
CREATE TABLE execution_driver (
    execution_id INTEGER PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at REAL NOT NULL
);
