"""The claim's statements on PostgreSQL: the commands taken and their `command.claimed`
events numbered and inserted in SQL, after an append in its transaction or alone.

A claim takes the oldest queued commands of running executions (`FOR UPDATE SKIP
LOCKED`: a claimer never waits for, nor takes, a row another one is taking) and logs one
`command.claimed` a command, numbered after the end of its execution's log, which the
claim must hold (`{hold}`): alone it waits for those logs in key order like every
appender; after an append it holds that append's logs and takes only the others it can
lock at once. `texts` makes each shape's text once.
"""

from __future__ import annotations

import functools

from milepost.store import port, sql


def _fold(column: str) -> str:
    """`sql.fold_key` of a column, in SQL."""
    v = f"(({column} # ({column} >> 32)) & 4294967295)"
    return f"(CASE WHEN {v} >= 2147483648 THEN {v} - 4294967296 ELSE {v} END)::int4"


_TAKEN = ", ".join(f"command.{c.strip()}" for c in sql.CMD_COLS.split(","))
_PICK = (
    # SKIP LOCKED: a claimer never waits for, nor takes, a row another one is taking; `OF c`
    # locks the command rows only. Its events need the log of their execution ({hold}):
    # a claim alone waits for those logs, in the order of their keys like every appender
    # (it holds no log yet: no cycle); a claim after an append holds that append's logs,
    # so it takes only the others it can lock at once and leaves the rest for the next
    "picked AS (SELECT c.command_id, c.execution_id FROM command c JOIN execution x"
    f" ON x.execution_id = c.execution_id WHERE c.status='{port.COMMAND_QUEUED}'"
    " AND x.status='RUNNING' AND NOT x.cancel_requested{pool} ORDER BY c.created_at, c.command_id"
    " LIMIT %(limit)s FOR UPDATE OF c SKIP LOCKED),"
    " free AS (SELECT x.execution_id FROM (SELECT DISTINCT execution_id FROM picked) x"
    " WHERE {hold}),"
    " taken AS (UPDATE command SET status=%(claimed)s, worker_id=%(worker)s,"
    " epoch=command.epoch+1, lease_expires_at=%(now)s + COALESCE(command.lease_s, %(lease)s),"
    " claimed_at=%(now)s, updated_at=%(now)s"
    " FROM picked JOIN free ON free.execution_id = picked.execution_id"
    " WHERE command.command_id = picked.command_id RETURNING {returning})"
)
_LOG = (
    # each log's end read once, not once a claim
    " ends AS (SELECT x.execution_id, COALESCE((SELECT max(e.seq) FROM event e"
    " WHERE e.execution_id = x.execution_id), 0) AS seq FROM"
    " (SELECT DISTINCT execution_id FROM claimed) x),"
    " numbered AS (SELECT claimed.*, row_number() OVER (ORDER BY created_at, command_id) AS n,"
    " ends.seq + row_number() OVER (PARTITION BY claimed.execution_id ORDER BY created_at,"
    " command_id) AS seq FROM claimed JOIN ends ON ends.execution_id = claimed.execution_id),"
    # a claim's parent is its command (`projection.claimed_event`, the other claim paths)
    " logged AS (INSERT INTO event (event_id, execution_id, seq, parent_event_id, event_type,"
    " step, status, result, worker_id, created_at) SELECT {id}, execution_id,"
    " seq, command_id, %(type)s, step, 'RUNNING', json_build_object('status',"
    " 'RUNNING', 'context', json_build_object('command_id', command_id, 'worker_id',"
    " worker_id, 'epoch', epoch, 'lease_expires_at', lease_expires_at, 'run', run, 'index',"
    " idx, 'attempt', attempt))::text, worker_id, %(now)s FROM numbered RETURNING event_id, seq)"
    f" SELECT {', '.join('numbered.' + c.strip() for c in sql.CMD_COLS.split(','))},"
    " logged.event_id, logged.seq FROM numbered JOIN logged"
    " ON logged.event_id = {numbered_id} ORDER BY created_at, command_id"
)
"""Number and insert the `command.claimed` of the rows of `claimed`, return them; the
event ids `{id}` come from a block (`ids.block_of`: the first of `limit` consecutive
ids, one parameter) or, from a generator that makes no blocks, a list of `limit` ids."""
_BLOCK_IDS = {
    "id": "%(first)s::bigint + n - 1",
    "numbered_id": "%(first)s::bigint + numbered.n - 1",
}
_LISTED_IDS = {"id": "(%(ids)s::bigint[])[n]", "numbered_id": "(%(ids)s::bigint[])[numbered.n]"}
_CLAIM_AND_LOG = (
    "WITH " + _PICK.replace("{returning}", _TAKEN) + ", claimed AS (SELECT * FROM taken)," + _LOG
)
"""The claim after an append, one statement: the logs it writes to are the append's (held
by this transaction, read as they are now) or ones it has just locked at once, which a
writer may have committed to since the statement began: then the unique index refuses
the event (SeqTaken) and the append is tried again."""
_CLAIM = (
    "WITH " + _PICK.replace("{returning}", "command.command_id") +
    # the next statement numbers the claims' events: it sees the log as it is now
    # that this one holds it (a statement reads as of its start)
    " SELECT set_config('milepost.claimed', coalesce(string_agg(command_id::text, ','),"
    " ''), true) FROM taken"
)
"""The claim alone: the claim, then `_LOG_CLAIMS` writes its events."""
_LOG_CLAIMS = (
    f"WITH claimed AS (SELECT {sql.CMD_COLS} FROM command WHERE command_id ="
    " ANY(string_to_array(current_setting('milepost.claimed'), ',')::bigint[]))," + _LOG
)
_WAIT = (
    "x.execution_id IN (SELECT s.execution_id FROM (SELECT d.execution_id FROM"
    f" (SELECT DISTINCT execution_id FROM picked) d ORDER BY {_fold('d.execution_id')}"
    f" OFFSET 0) s WHERE pg_advisory_xact_lock({sql.NS_APPEND},"
    f" {_fold('s.execution_id')}) IS NOT NULL)"
)
"""The claim alone: wait for each log, keys in order (`OFFSET 0` keeps the sort first)."""
_TRY = f"pg_try_advisory_xact_lock({sql.NS_APPEND}, {_fold('x.execution_id')})"
"""The claim after an append: only the logs free now (or held by this transaction)."""


@functools.cache
def texts(after_append: bool, pool: bool, driver: bool, block: bool) -> tuple[bytes | None, bytes]:
    """The claim's statements, made once per shape: after an append (None, the claim with
    its events) else (the claim, its events); filtered by pool and by driver or not; the
    events' ids from a block or from a list."""
    where = sql.claim_filters(pool, driver, "%(pool)s", "%(driver)s")
    claim = (
        None if after_append else _CLAIM.replace("{pool}", where).replace("{hold}", _WAIT).encode()
    )
    logging = (
        _CLAIM_AND_LOG.replace("{pool}", where).replace("{hold}", _TRY)
        if after_append
        else _LOG_CLAIMS
    )
    for name, value in (_BLOCK_IDS if block else _LISTED_IDS).items():
        logging = logging.replace("{" + name + "}", value)
    return claim, logging.encode()
