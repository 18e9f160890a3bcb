-- 15: the log keyed by its event ids. The surrogate `id` (an identity column) was read by
-- no statement, yet every append wrote its primary-key index beside event_id's UNIQUE one
-- and drew from its sequence. Dropping the column drops that index; event_id stays
-- UNIQUE NOT NULL, the key every statement uses.
ALTER TABLE event DROP COLUMN IF EXISTS id;
