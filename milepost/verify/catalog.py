"""The playbooks the suite registers, shipped in this package (`playbooks/`)."""

from __future__ import annotations

from importlib import resources

PLAYBOOKS = ("child.yaml", "order.yaml")
"""In registration order: the order's `big` branch starts the child."""


def texts() -> list[str]:
    folder = resources.files("milepost.verify") / "playbooks"
    return [(folder / name).read_text(encoding="utf-8") for name in PLAYBOOKS]
