"""The HTTP server: `create_app(settings)` (docs/server-contract.md is its contract)."""
