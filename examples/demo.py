"""`make demo`: start a local HTTP API, run examples/demo.yaml end to end, show the result."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from milepost.conformance.mock_api import MockServer

HERE = Path(__file__).resolve().parent
DB = ".milepost/demo.db"
UI_URL = "http://127.0.0.1:8082/ui/"


def main() -> int:
    milepost = Path(sys.executable).with_name("milepost")
    with MockServer() as api:
        print(f"local API at {api.url}")
        code = subprocess.call([str(milepost), "run", str(HERE / "demo.yaml"),
                                "--set", f"api_url={api.url}", "--db", DB])  # fmt: skip
    # the run was embedded (no server): `milepost ui` serves the web UI over its database
    print(f"\nsee the run in the web UI: {milepost} ui --db {DB}\n"
          f"  then open {UI_URL} and sign in with the token it prints")  # fmt: skip
    return code


if __name__ == "__main__":
    sys.exit(main())
