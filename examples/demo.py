"""`make demo`: start a local HTTP API, run examples/demo.yaml end to end, show the result,
then keep the web UI open over the run's database until Ctrl-C.

The UI stays open only for a person at a terminal: piped or scripted (CI), or with
MILEPOST_DEMO_UI=0, the demo prints the command that opens it and exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from milepost.conformance.mock_api import MockServer

HERE = Path(__file__).resolve().parent
DB = ".milepost/demo.db"


def keep_ui_open(env: os._Environ[str] | dict[str, str], interactive: bool) -> bool:
    return interactive and env.get("MILEPOST_DEMO_UI", "1").lower() not in ("0", "false", "no")


def main() -> int:
    milepost = Path(sys.executable).with_name("milepost")
    port = os.environ.get("MILEPOST_DEMO_UI_PORT", "8082")
    with MockServer() as api:
        print(f"local API at {api.url}")
        code = subprocess.call(
            [
                str(milepost),
                "run",
                str(HERE / "demo.yaml"),
                "--set",
                f"api_url={api.url}",
                "--db",
                DB,
            ]
        )
    ui = [str(milepost), "ui", "--db", DB, "--port", port]
    if not keep_ui_open(os.environ, sys.stdin.isatty() and sys.stdout.isatty()):
        # the run was embedded (no server): `milepost ui` serves the web UI over its database
        print(
            f"\nsee the run in the web UI: {' '.join(ui)}\n"
            f"  then open http://127.0.0.1:{port}/ui/ and sign in with the token it prints"
        )
        return code
    print("\nthe web UI over this run's database (Ctrl-C to stop):", flush=True)
    proc = subprocess.Popen(ui)
    try:
        proc.wait()
    except KeyboardInterrupt:
        # the terminal's Ctrl-C reached `milepost ui` too; wait for it to drop its token
        proc.send_signal(signal.SIGINT)
        proc.wait()
    return code


if __name__ == "__main__":
    sys.exit(main())
