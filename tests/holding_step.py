"""A python step that only a kill stops early: it appends its pid to `workload.out`, then
sleeps a minute. The cancel and children tests of both modes run it, read the pids to
find its process, and check that the process is gone once the run is cancelled."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.shared import wait_for

HOLD = """\
import os, time
fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.write(fd, f"{os.getpid()}\\n".encode())
os.close(fd)
time.sleep(60)
result = {"slept": True}
"""


def hold_tool(indent: int = 4, extra: str = "") -> str:
    """The `tool:` block of a step running HOLD, at `indent`; `extra`: more input (YAML,
    after a comma)."""
    code = textwrap.indent(HOLD, " " * (indent + 4))
    pad = " " * indent
    return (
        f"{pad}tool:\n{pad}  kind: python\n"
        f'{pad}  input: {{out: "{{{{ workload.out }}}}"{extra}}}\n{pad}  code: |\n{code}'
    )


def pids(out: Path, count: int = 1) -> list[int]:
    """The pids the steps wrote to `out`; [] until `count` of them have (a wait's check)."""
    lines = out.read_text().split() if out.exists() else []
    return [int(p) for p in lines] if len(lines) >= count else []


def started(out: Path, count: int = 1, what: str | None = None) -> list[int]:
    """The pids, once `count` steps have started (30 s at the most: a worker process
    starts its python first)."""
    return wait_for(
        lambda: pids(out, count), what or f"{count} python step(s) to start", timeout=30
    )
