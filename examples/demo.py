"""`make demo`: start a local HTTP API, run examples/demo.yaml end to end, show the result."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from milepost.conformance.mock_api import MockServer

HERE = Path(__file__).resolve().parent


def main() -> int:
    milepost = Path(sys.executable).with_name("milepost")
    with MockServer() as api:
        print(f"local API at {api.url}")
        return subprocess.call([str(milepost), "run", str(HERE / "demo.yaml"),
                                "--set", f"api_url={api.url}", "--db", ".milepost/demo.db"])


if __name__ == "__main__":
    sys.exit(main())
