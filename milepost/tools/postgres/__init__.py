"""The postgres tool (DSL 3.3): a script run in order, in one transaction, on PostgreSQL.

```yaml
tool: {kind: postgres, auth: "{{ pg_auth }}", schema: sales,
       command: "SELECT id, profile FROM users WHERE id = %s", params: [7]}
```

- Connection: `auth` names a registered credential of type `postgres`, resolved through the
  `credentials` lookup of the `ToolRuntime` (data `host port user password database`, or
  the aliases `db_host db_port db_user db_password db_name`; the port may be a string), or
  `connection_string` gives a libpq connection string / URL. With both, the credential's
  fields override the string's.
- `command` (or `query`; a string or a list of strings) is split by `sql.script_statements`;
  the statements run in order in one transaction, rolled back on error. A script that manages transactions itself (BEGIN,
  COMMIT, ...) or holds a statement PostgreSQL refuses inside a transaction block (VACUUM,
  CREATE DATABASE, ... CONCURRENTLY) runs statement by statement in autocommit mode instead.
- `params`: a list fills the positional `%s` placeholders in order, across statements
  (each statement takes as many values as it holds placeholders); a mapping fills
  `%(name)s` placeholders. Statements without placeholders run without parameters, so a
  literal `%` needs no escaping there. Mapping values are sent as JSON.
- `schema` (a name, a comma-separated list or a list) sets the `search_path` for the call.
- Result of the last statement: `{columns, rows, row_count}` when it returns rows (rows are
  objects, values converted by `sql.to_json_value`: json/jsonb -> JSON values, numerics ->
  numbers, dates and times -> ISO-8601 strings, uuid -> string, bytea -> base64; dates
  outside Python's range, such as `infinity`, stay text), else `{affected_rows}`; beside it
  one `command_<i>` key per statement (`sql.script_result`, NoETL's shape).
- Errors: `db_error` with `code` = SQLSTATE (serialization failures and deadlocks are
  retryable: the transaction was rolled back); `db_connection` (retryable) when connecting
  fails or the connection is lost; `timeout` (retryable) past `ToolCall.timeout`, which
  covers connecting too and cancels the running statement on the server; `invalid` for a
  bad tool mapping or a missing or mistyped credential. The password (and the connection
  string) is masked (`sanitize.Redactor`) in every message and in the result.

The package: `tool` (the calls and their errors), `connections` (the cache of idle
connections, and how values load), `params` (libpq parameters from `auth` and
`connection_string`), `statements` (placeholders, transactions, `search_path`).

Connections are cached per event loop and connection parameters (at most `max_idle` idle
ones, each idle at most `idle_timeout` seconds) and reset with `DISCARD ALL` before reuse,
so a call sees a fresh session. `aclose()` closes them; a connection that failed, timed out
or was cancelled is closed, never cached.
"""
