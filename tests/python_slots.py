"""Python steps that hold their process until the test lets them go (issue 33, item 11).

A step writes `<out>/started-<name>-<i>` (its pid, written whole: a rename), then waits for
`<out>/go`. The test counts the markers to see how many steps run at once, and reads the
pids to see their processes retire. The steps poll the file themselves (bounded): the test
never sleeps, it polls the markers with a deadline.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

HOLD = """\
import os, time
mark = os.path.join(out, f"started-{name}-{i}")
with open(mark + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace(mark + ".tmp", mark)
deadline = time.monotonic() + 120
while not os.path.exists(os.path.join(out, "go")):
    if time.monotonic() > deadline:
        raise TimeoutError("the test never let this step go")
    time.sleep(0.02)
result = os.getpid()
"""


def held(name: str, count: int) -> str:
    """A playbook `slots/<name>`: `count` python steps at once (a parallel loop), each
    holding its process until `<workload.out>/go` exists."""
    code = textwrap.indent(HOLD, " " * 8)
    return (
        "apiVersion: noetl.io/v2\nkind: Playbook\n"
        f"metadata: {{name: {name}, path: slots/{name}}}\nworkflow:\n"
        "  - step: hold\n"
        f'    loop: {{in: "{{{{ range({count}) | list }}}}", iterator: i,'
        f" spec: {{mode: parallel, max_in_flight: {count}}}}}\n"
        "    tool:\n      kind: python\n"
        f'      input: {{out: "{{{{ workload.out }}}}", name: {name}, i: "{{{{ i }}}}"}}\n'
        f"      code: |\n{code}"
    )


def started(out: Path) -> dict[str, int]:
    """The steps holding their process so far: marker name -> pid."""
    return {p.name: int(p.read_text()) for p in out.glob("started-*") if p.suffix != ".tmp"}


def let_go(out: Path) -> None:
    (out / "go").write_text("")
