-- 17: the engine's own settlements are fenced too (issue 33). A `command.failed` the engine
-- writes for a command nobody will report on was built from the row it read; a worker's
-- claim (or report, or a lease expiry) may commit between that read and the append. The
-- append then requires the row still open (queued or claimed) at the epoch read, as a
-- worker's report requires its claim: `open` per command; false is the claim check of
-- migration 3, which this supersedes (kept for a server of the last version still running). FOR UPDATE holds the rows until the commit.
CREATE OR REPLACE FUNCTION milepost_check_fences(ids BIGINT[], epochs BIGINT[], open BOOLEAN[])
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    live INTEGER;
BEGIN
    SELECT count(*) INTO live FROM (
        SELECT 1 FROM command c JOIN unnest(ids, epochs, open) AS f(id, epoch, open)
            ON c.command_id = f.id AND c.epoch = f.epoch
        WHERE c.status = 'claimed' OR (f.open AND c.status = 'queued')
        FOR UPDATE OF c) AS held;
    IF live <> cardinality(ids) THEN
        RAISE EXCEPTION 'a command row is not as its fence requires' USING ERRCODE = 'MP409';
    END IF;
END $$;
