"""Mock HTTP API used by the NoETL conformance fixtures.

A small stateful JSON-over-HTTP service standing in for a paginated third-party API, written
from the behavioural specification in ``conformance/noetl/MOCK_API.md``. The conformance suite
points the fixtures' ``api_url`` at it (``${MOCK_API_URL}``).

Public API (this package's path is the one to import from):

* :func:`create_app` returns a fresh FastAPI application with its own, fresh state.
* :class:`MockServer` runs an application with uvicorn in a background thread (for tests).
* :func:`main` is the command line: ``python -m milepost.conformance.mock_api [PORT]``.

The package: ``data`` (the data sets and their pages), ``state`` (what the endpoints
count), ``app`` (the routes), ``server`` (the background server and the command line).
"""

from milepost.conformance.mock_api.app import create_app
from milepost.conformance.mock_api.server import DEFAULT_PORT, MockServer, main
from milepost.conformance.mock_api.state import MockState

__all__ = ["DEFAULT_PORT", "MockServer", "MockState", "create_app", "main"]
