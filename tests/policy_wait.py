"""A retry that waits inside its attempt (issue 33, item 12), as the embedded, server and
web UI tests run it: a python step prints, raises, and its task policy tries again in 10
minutes, so the run stays RUNNING with a wait every read should name."""

from __future__ import annotations

import textwrap

RAISES_THEN_WAITS = textwrap.dedent("""\
    apiVersion: noetl.io/v2
    kind: Playbook
    metadata: {name: policy_wait, path: tests/policy_wait}
    workflow:
      - step: flaky
        tool:
          kind: python
          code: |
            print("about to fail")
            raise ValueError("the input file is missing")
          spec:
            policy:
              rules:
                - when: "{{ output.status == 'error' }}"
                  then: {do: retry, attempts: 3, delay: 600}
    """)
