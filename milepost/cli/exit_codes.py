"""The exit codes of every `milepost` command, in one place (the README lists them).

A script can tell a run that failed (1) from a command it used wrongly or that was
refused (2) and from a server or database it could not reach (3, worth a retry).
"""

from __future__ import annotations

from milepost.core import state as st

OK = 0
"""Done; for a command that follows a run to its end (`run`, `resume`, `status --wait`,
`execute --wait`): the run COMPLETED."""
RUN_FAILED = 1
"""The run ended FAILED or CANCELLED, `run` refused the playbook, or `validate` found a
problem."""
REFUSED = 2
"""Bad input or usage (an unknown option, a file that cannot be read), no such execution,
or the engine or server refused (a run someone else drives, a role that may not)."""
UNAVAILABLE = 3
"""The server or the database could not be reached or is unavailable for now: try again."""
INTERRUPTED = 130
"""Ctrl-C (128 + SIGINT, as shells use): a run is left as it is, to be followed or resumed."""


def of_run(status: str) -> int:
    """The exit code of a command that followed a run to `status`."""
    return OK if status == st.COMPLETED else RUN_FAILED
