"""The line of a python tool's code that raised, read off the traceback its worker
process sends back: the failure names it (`line`, `code_line`), so `milepost doctor` and
the run's error can point at it."""

from __future__ import annotations

import re
from typing import Any

from milepost.tools.python_worker import FILENAME

_FRAME = re.compile(r'File "' + re.escape(FILENAME) + r'", line (\d+)')


def failing_line(trace: str | None, source: str | None) -> dict[str, Any]:
    """`{line, code_line}` of the innermost frame of the tool's code in `trace` (1-based,
    as written in `code`); empty when the traceback names none (the error was raised
    before the code ran)."""
    found = _FRAME.findall(trace or "")
    if not found:
        return {}
    line = int(found[-1])
    lines = (source or "").splitlines()
    text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    return {"line": line, "code_line": text or None}
