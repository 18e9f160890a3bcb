"""The browser tests' fixtures (a cluster, Chromium, the screenshots' folder), shared by the
web UI's test modules; they live with the first of them, `test_web_ui.py`."""

from tests.e2e.test_web_ui import artifacts, browser, cluster  # noqa: F401
