"""Bad input at the edge (issue 8, items 10-12): every oversized, non-finite, too deep or
malformed value gets a 4xx naming the field and the limit, and nothing is stored."""

from __future__ import annotations

from tests.api.support import HELLO, Api, error


def _bomb(levels: int) -> str:
    rows = ["  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    rows += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return HELLO.replace("workload: {name: World}", "workload:\n" + "\n".join(rows), 1)


def test_register_refuses_an_alias_bomb_with_the_limit_named(api: Api) -> None:
    body = error(api.post("/api/catalog/register", {"content": _bomb(6)}), 422,
                 "playbook_invalid")  # fmt: skip
    assert len(body["problems"]) == 1
    assert "MILEPOST_MAX_YAML_ALIASES" in body["problems"][0]
    assert api.store.list_playbooks() == []
