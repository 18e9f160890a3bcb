-- 1: the log, its projections, snapshots, catalog, result store
CREATE TABLE event (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id INTEGER NOT NULL UNIQUE,
    execution_id INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    parent_event_id INTEGER,
    event_type TEXT NOT NULL,
    step TEXT,
    status TEXT,
    result TEXT,
    meta TEXT,
    worker_id TEXT,
    created_at REAL NOT NULL
);
CREATE UNIQUE INDEX event_execution_seq ON event (execution_id, seq);
CREATE TABLE execution (
    execution_id INTEGER PRIMARY KEY,
    path TEXT NOT NULL,
    version INTEGER,
    status TEXT NOT NULL,
    parent_execution_id INTEGER,
    error TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX execution_status ON execution (status, created_at);
CREATE TABLE command (
    command_id INTEGER PRIMARY KEY,
    execution_id INTEGER NOT NULL,
    step TEXT NOT NULL,
    run INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    idempotency_key TEXT NOT NULL,
    status TEXT NOT NULL,
    worker_id TEXT,
    epoch INTEGER NOT NULL DEFAULT 0,
    lease_expires_at REAL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX command_open ON command (status, execution_id);
CREATE TABLE snapshot (
    execution_id INTEGER PRIMARY KEY,
    seq INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE TABLE catalog (
    path TEXT NOT NULL,
    version INTEGER NOT NULL,
    content TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (path, version)
);
CREATE TABLE result_blob (
    blob_id INTEGER PRIMARY KEY AUTOINCREMENT,
    execution_id INTEGER NOT NULL,
    data BLOB NOT NULL,
    created_at REAL NOT NULL
);
