"""One settings object, read from `MILEPOST_*` environment variables."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from milepost.errors import MilepostError
from milepost.ids import MAX_MACHINE

DEFAULT_DB = ".milepost/milepost.db"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MILEPOST_", extra="ignore")

    database_url: str | None = None
    """Where the embedded engine and the CLI keep their log: a path or `sqlite:///path`."""
    sqlite_synchronous: str = "NORMAL"
    """SQLite `synchronous` level: NORMAL survives process crashes, FULL also power loss."""
    concurrency: int = 16
    """Commands one process runs at once: the in-process workers of `milepost run`, and
    the attempts of one `milepost worker` (one setting, one default for both)."""
    python_workers: int = Field(default=2, ge=0)
    """Processes that run `python` tools kept warm however long they idle (a worker starts
    them as it starts). More start on demand, up to `concurrency` (no python step waits on
    another's while a slot is free), and stop once idle for `python_idle_seconds`; each
    costs ~16 MB of memory (RSS) before its code imports anything."""
    python_idle_seconds: float = Field(default=60.0, gt=0)
    """How long a python process beyond the `python_workers` kept warm may idle before it
    stops."""
    machine_id: int | None = Field(default=None, ge=0, le=MAX_MACHINE)
    """Snowflake machine id (0-1023), distinct per process writing to one database; unset,
    each process leases one from the database (servers, `milepost run`) or from its server
    (workers), which keeps them distinct on its own."""
    database_urls: str | None = None
    """Several PostgreSQL URLs, comma-separated: executions shard across them by id, the
    catalog lives on the first (`milepost server` and the CLI when `--db` is not given)."""
    secret_key: str | None = None
    """Fernet key encrypting credential data at rest (`milepost secret-key` makes one); the
    server refuses to start without it."""
    nats_url: str | None = None
    """NATS JetStream for worker wake-ups (`nats://127.0.0.1:4222`); unset = no NATS, workers
    poll."""
    nats_pool: str = "default"
    """The older name of `pool` (a worker's pool, whose wake-ups it reads on
    `milepost.commands.<pool>`); the server publishes each command on its own pool's."""
    pool: str | None = None
    """The pool a `milepost worker` serves (`spec.pool`, DSL 10.6); unset, `nats_pool`."""
    server_url: str | None = None
    """The server a `milepost worker` claims from; several servers of one database,
    comma-separated: it moves to the next when its server stops answering (its claims,
    reports and heartbeats go on there: its leases are in the shared database)."""
    token: str | None = None
    """The bearer token a `milepost worker` shows its server (role `worker` or `admin`)."""
    worker_id: str | None = None
    """The name a worker's claims and events carry; unset, `host:pid`."""
    grace_seconds: float = 30.0
    """How long a stopping worker lets its running attempts finish before it cancels them
    unreported (their leases then expire and the server re-issues them)."""
    otel_exporter: str | None = None
    """Where spans of runs and attempts go (`milepost/telemetry.py`): `console`, `otlp`
    (endpoint from the standard `OTEL_EXPORTER_OTLP_*` variables) or `none`; unset, the
    standard `OTEL_TRACES_EXPORTER`, else no spans at all."""
    log_level: str = "INFO"
    """Log level of a `milepost worker` process."""
    log_cap_bytes: int = Field(default=64 * 1024, ge=256, le=1024 * 1024)
    """Bytes kept of each stream (stdout, stderr, traceback) of one attempt's logs
    (`milepost logs`): its head and its tail, the cut in between counted. At most 1 MiB:
    a report carries them, and a batch of reports must stay within `max_body_bytes`."""
    lease_seconds: float = 30.0
    """Default lease of a claim (a step's `spec.liveness` overrides it); workers heartbeat
    every third of the lease their claim gave."""
    default_timeout: float | None = Field(default=86400.0, ge=0)
    """Seconds an attempt of a step without `spec.timeout` may run, heartbeating or not,
    before the engine fails it (kind `timeout`, retryable through `spec.retry`): a day, so
    an attempt that heartbeats forever cannot hold its slot forever, yet a step of hours
    is not cut short; a step that runs for days sets its own `spec.timeout`. 0: no bound."""
    reconcile_interval: float = 1.0
    """Seconds between reconciler ticks in the server (0 = no background reconciler)."""
    requeue_notice_after: float = 5.0
    """Re-publish the wake-up of a command still queued after this many seconds."""
    strict_playbooks: bool = False
    """Refuse to register a playbook with warnings (an unknown tool field, DSL 12.2), as
    `milepost validate --strict` fails it; the refusal (422) lists them."""
    max_playbook_bytes: int = 4 * 1024 * 1024
    """Largest playbook accepted (`validate`, `run`, `register`), refused before it is
    parsed: a 200-step playbook is about 40 kB."""
    max_yaml_aliases: int = 100_000
    """Nodes YAML aliases may add to a playbook once expanded (each `*ref` counts its
    anchor's whole subtree): stops an alias bomb before it expands."""
    max_expanded_bytes: int = Field(default=16 * 1024 * 1024, ge=1)
    """Bytes a document from outside may expand to once its YAML aliases are followed: a
    playbook (`validate`, `run`, `register`), a `--set` value, a run's workload (`--payload`,
    `--set`, `/api/execute`). Each node counts one byte plus its scalar's text in UTF-8, each
    `*ref` its anchor's whole expansion; a document is refused at the alias that crosses it,
    before anything expands (a 1 MB file aliasing a 1 MiB string a thousand times would be a
    gigabyte). Without aliases a document's expansion is at most about its size."""
    max_json_depth: int = 64
    """Deepest nesting of the free JSON a request carries (`workload`, `meta`, `context`,
    credential `data`) and of a playbook's YAML."""
    max_body_bytes: int = 16 * 1024 * 1024
    """Largest HTTP request body and worker-channel message (413 beyond it). `milepost
    server` lets uvicorn take WebSocket messages of twice this, so a channel message over
    it still gets its 413 reply instead of a closed socket."""
    driver_ttl: float = 15.0
    """Seconds an embedded run's driver lease outlives its process (`milepost run`/`resume`
    renew it every third of this): how long `resume` may wait after a kill on another host."""

    approval_webhook_url: str | None = None
    """Where every approval event is POSTed once committed (`engine/webhooks.py`): the
    server, `milepost run` and the CLI's local decisions; unset, no webhook."""
    approval_webhook_secret: str | None = None
    """Signs each webhook body (`X-Milepost-Signature: sha256=<HMAC-SHA256 hex>`); required
    with `approval_webhook_url`."""

    fault_skip_fence: bool = False
    """For testing `milepost verify` only: the engine takes reports of claims that are no
    longer live (`engine/faults.py`); the suite must then fail. Never set it otherwise."""

    @field_validator("default_timeout")
    @classmethod
    def _zero_is_no_bound(cls, value: float | None) -> float | None:
        return value or None

    def worker_pool(self) -> str:
        """The pool a worker serves: `pool`, else the wake-up subject's `nats_pool`."""
        return self.pool or self.nats_pool

    def shard_urls(self) -> list[str]:
        """The URLs of `database_urls`, in their order (the order places executions)."""
        return [url.strip() for url in (self.database_urls or "").split(",") if url.strip()]


class UnsupportedDatabase(MilepostError):
    """This database URL is not supported."""

    code = "unsupported_database"


def sqlite_path(url: str | None, settings: Settings | None = None) -> str:
    """The SQLite file for `--db`, else `MILEPOST_DATABASE_URL`, else `.milepost/milepost.db`."""
    value = url or (settings or Settings()).database_url or DEFAULT_DB
    if value.startswith("sqlite:///"):
        return value[len("sqlite:///") :]
    if value.startswith("sqlite://"):
        return value[len("sqlite://") :] or ":memory:"
    if "://" in value:
        scheme = value.split("://", 1)[0]
        raise UnsupportedDatabase(
            f"database URL scheme {scheme!r} is not supported by the embedded engine "
            "(use a file path or sqlite:///path)",
            url=value,
        )
    return str(Path(value))
