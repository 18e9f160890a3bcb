"""`milepost events -f` and `milepost logs -f` against a real `milepost server`: they read
the run's SSE stream (one page of the log first, then no polling), print each event as it
is stored, end when the run ends, and after a cut connection resume from the last event
printed, printing none twice."""

from __future__ import annotations

import json
import subprocess
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.cutting_proxy import CuttingProxy, cutting_proxy
from tests.acceptance.harness import MILEPOST, Cluster, database
from tests.shared import wait_for

pytestmark = pytest.mark.slow

_WAIT = """
    tool:
      kind: python
      code: |
        import os, time
        print("waiting for", GO)
        deadline = time.monotonic() + 60
        while not os.path.exists(GO) and time.monotonic() < deadline:
            time.sleep(0.05)
        result = 1
"""
WAITS = "apiVersion: noetl.io/v2\nkind: Playbook\n" + textwrap.dedent(
    """
metadata: {name: follow, path: tests/follow-stream}
workflow:
  - step: start
    tool: {kind: shell, command: "echo ready"}
    next: [{step: first}]
  - step: first"""
    + _WAIT.replace("GO", "GO1")
    + """
    next: [{step: second}]
  - step: second"""
    + _WAIT.replace("GO", "GO2")
    + """
    next: [{step: after}]
  - step: after
    tool: {kind: shell, command: "echo done"}
"""
)


def waits(tmp: Path) -> str:
    """The playbook, its steps `first` and `second` waiting for files `go1`, `go2` in `tmp`."""
    return WAITS.replace("GO1", repr(str(tmp / "go1"))).replace("GO2", repr(str(tmp / "go2")))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with database("sqlite", tmp_path) as url, Cluster.running(url, tmp_path) as made:
        yield made


class Lines:
    """A process's stdout read by a thread, so a test can wait for a line while it runs."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        assert proc.stdout is not None
        self._thread = threading.Thread(target=self._read, args=(proc.stdout,), daemon=True)
        self._thread.start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.append(line)

    def finish(self) -> tuple[int, list[str], str]:
        assert self.proc.stdout is not None and self.proc.stderr is not None
        code = self.proc.wait(timeout=60)
        self._thread.join(timeout=10)
        err = self.proc.stderr.read()
        self.proc.stdout.close()
        self.proc.stderr.close()
        return code, self.lines, err


def _streams(proxy: CuttingProxy, xid: str) -> list[str]:
    return [r for r in proxy.requests() if r.startswith(f"GET /api/executions/{xid}/stream")]


def test_events_follow_streams_prints_as_stored_and_resumes_once(
    cluster: Cluster, tmp_path: Path
) -> None:
    xid = cluster.run(waits(tmp_path))
    reader = cluster.token("viewer")
    with cutting_proxy(cluster.port) as proxy:
        proc = subprocess.Popen(
            [MILEPOST, "events", xid, "-f", "--json", "--server", proxy.url],
            env={**cluster.env, "MILEPOST_TOKEN": reader},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        out = Lines(proc)
        wait_for(lambda: _streams(proxy, xid), "the follower to open the run's stream")
        (tmp_path / "go1").touch()
        # printed as they are stored: the second step's claim while that step still waits
        wait_for(
            lambda: any('"command.claimed"' in x and '"second"' in x for x in out.lines),
            "the follower to print the second step's claim",
            timeout=30,
        )
        assert proc.poll() is None
        printed = len(out.lines)
        assert proxy.cut() >= 1  # the stream's connection goes down mid-run
        wait_for(lambda: len(_streams(proxy, xid)) >= 2, "the follower to connect again")
        (tmp_path / "go2").touch()
        code, lines, err = out.finish()
    assert code == 0, err
    events = [json.loads(line) for line in lines]
    seqs = [e["seq"] for e in events]
    # each event once, in order, all of the log: the reconnect resumed after the last printed
    assert seqs == [e["seq"] for e in cluster.client.events(xid)]
    assert seqs == sorted(set(seqs)) and len(seqs) > printed
    assert events[-1]["event_type"] == "execution.completed"
    first, again = _streams(proxy, xid)[:2]
    assert again == f"GET /api/executions/{xid}/stream?after={seqs[printed - 1]}" != first
    # one page of the log before the stream, then no polling
    assert len([r for r in proxy.requests() if f"/api/executions/{xid}/events" in r]) == 1


def test_logs_follow_wakes_on_the_streams_reports_and_ends_with_the_run(
    cluster: Cluster, tmp_path: Path
) -> None:
    xid = cluster.run(waits(tmp_path))
    reader = cluster.token("viewer")
    with cutting_proxy(cluster.port) as proxy:
        proc = subprocess.Popen(
            [MILEPOST, "logs", xid, "-f", "--json", "--server", proxy.url],
            env={**cluster.env, "MILEPOST_TOKEN": reader},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        out = Lines(proc)
        wait_for(lambda: _streams(proxy, xid), "the follower to open the run's stream")
        (tmp_path / "go1").touch()
        wait_for(lambda: len(out.lines) >= 2, "the first step's output", timeout=30)
        proxy.cut()
        wait_for(lambda: len(_streams(proxy, xid)) >= 2, "the follower to connect again")
        (tmp_path / "go2").touch()
        code, lines, err = out.finish()
    assert code == 0, err
    entries = [json.loads(line) for line in lines]
    assert [(e["step"], e["text"]) for e in entries] == [
        ("start", "ready\n"),
        ("first", f"waiting for {tmp_path / 'go1'}\n"),
        ("second", f"waiting for {tmp_path / 'go2'}\n"),
        ("after", "done\n"),
    ]
    # the logs are read again on reports, not every second while the steps waited
    logs_reads = [r for r in proxy.requests() if f"/api/executions/{xid}/logs" in r]
    assert len(logs_reads) <= 6, logs_reads
