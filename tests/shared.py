"""Where the shared test data lives: `MILEPOST_SHARED`, else `shared/` beside the checkout.

The data (NoETL conformance playbooks, the peer benchmark) is read in place, never
copied into the repo. Outside CI a missing folder skips the tests that need it; under
CI (`CI=true`) it is an error, so a broken checkout cannot pass by skipping.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED = Path(os.environ.get("MILEPOST_SHARED") or Path(__file__).resolve().parents[2] / "shared")
CONFORMANCE = SHARED / "conformance" / "noetl"
PLAYBOOKS = CONFORMANCE / "playbooks"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

if IN_CI and not PLAYBOOKS.is_dir():
    raise RuntimeError(f"CI needs the shared test data at {SHARED} (set MILEPOST_SHARED)")

needs_shared = pytest.mark.skipif(not PLAYBOOKS.is_dir(), reason=f"no shared data at {SHARED}")
