-- 8: liveness and stalls (issue 11).
-- command.lease_s: the command's own lease (its step's spec.liveness, from the
-- command.issued that carries it); NULL: the lease the claimer asks for. Claims and
-- heartbeats extend a claim by COALESCE(lease_s, asked).
-- command.claimed_at: when its live claim was taken (a heartbeat leaves it): the engine's
-- default_timeout bounds an attempt of a step without spec.timeout from there.
-- execution.stall_after: the run's executor.spec.stall_after (from execution.started);
-- NULL: the run is never failed for making no progress. Nothing to backfill: before this
-- version no event carried lease_s or stall_after (a claim live at the upgrade has no
-- claimed_at: it is not bounded).
ALTER TABLE command ADD COLUMN lease_s REAL;
ALTER TABLE command ADD COLUMN claimed_at REAL;
ALTER TABLE execution ADD COLUMN stall_after REAL;
