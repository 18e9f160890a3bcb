-- 3: check, in an append's transaction, that the commands reported on are still claimed
-- with the reports' epochs. The server then needs no read of the command rows before its
-- append: a report from a live claim (the common case) costs one round trip, not two.
-- FOR UPDATE holds the rows, so no claim, release or heartbeat moves them before the
-- commit. The SQLSTATE is milepost's own: the store turns it into ClaimMoved.
CREATE FUNCTION milepost_check_claims(ids BIGINT[], epochs BIGINT[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    live INTEGER;
BEGIN
    SELECT count(*) INTO live FROM (
        SELECT 1 FROM command c JOIN unnest(ids, epochs) AS f(id, epoch)
            ON c.command_id = f.id AND c.epoch = f.epoch
        WHERE c.status = 'claimed'
        FOR UPDATE OF c) AS held;
    IF live <> cardinality(ids) THEN
        RAISE EXCEPTION 'a reported claim is no longer live' USING ERRCODE = 'MP409';
    END IF;
END $$;
