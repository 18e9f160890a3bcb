"""``python -m milepost.conformance.mock_api [PORT]``."""

from milepost.conformance.mock_api.server import main

main()
