"""What a process pays at start-up: the CLI (every `milepost` command, the server and
worker processes start through it) loads the libraries of optional features only when
they are used: duckdb on the first duckdb call, nats-py when a server connects to NATS."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_cli_loads_neither_duckdb_nor_nats() -> None:
    code = (
        "import sys, milepost.cli, milepost.engine.embedded, milepost.tools.runtime\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('duckdb', 'nats')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]"
