"""`make demo` (examples/demo.py): at a terminal it keeps the web UI open over the run's
database until Ctrl-C; piped it prints how to open it and exits."""

from __future__ import annotations

import contextlib
import os
import pty
import select
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.acceptance.harness import free_port
from tests.shared import clean_env, wait_for

pytestmark = pytest.mark.slow

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.py"


def _up(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_at_a_terminal_the_demo_keeps_the_ui_open_until_ctrl_c(tmp_path: Path) -> None:
    port = free_port()
    env = clean_env(MILEPOST_DEMO_UI_PORT=str(port))
    env.pop("MILEPOST_DEMO_UI", None)
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, str(DEMO)],
        cwd=tmp_path,
        env=env,
        stdin=child,
        stdout=child,
        stderr=child,
        start_new_session=True,
    )
    os.close(child)
    out = bytearray()

    def printed(text: str) -> bool:
        # a pty read blocks: read only what is there, so wait_for's deadline holds
        with contextlib.suppress(OSError):
            while select.select([main], [], [], 0.1)[0]:
                out.extend(os.read(main, 65536))
        return text in out.decode(errors="replace")

    try:
        wait_for(lambda: printed(f"http://127.0.0.1:{port}/ui/"), "the UI's address", timeout=120)
        assert "COMPLETED" in out.decode(errors="replace")
        wait_for(lambda: _up(f"http://127.0.0.1:{port}/health"), "the UI to answer", timeout=30)
        assert proc.poll() is None  # still open for a look
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C at the terminal does
        assert proc.wait(timeout=30) == 0, out.decode(errors="replace")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        os.close(main)


def test_piped_the_demo_prints_how_to_open_the_ui_and_exits(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(DEMO)],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "COMPLETED" in done.stdout
    assert "milepost ui --db .milepost/demo.db --port 8082" in done.stdout
