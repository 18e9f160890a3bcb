"""The catalog routes: register (versions, problems), list, resource."""

from __future__ import annotations

from tests.api.support import HELLO, LOOP, Api, error, ok


def test_register_returns_path_version_and_catalog_id(api: Api) -> None:
    entry = api.register(HELLO)
    assert entry["path"] == "tests/hello" and entry["version"] == 1
    assert entry["catalog_id"] == "tests/hello@1" and entry["created_at"].endswith("+00:00")
    assert api.register(HELLO)["version"] == 1  # the same text: no new version
    assert api.register(HELLO + "\n# changed\n")["version"] == 2


def test_an_invalid_playbook_is_422_with_every_problem_and_nothing_is_stored(api: Api) -> None:
    bad = HELLO.replace("next: shout", "next: shuot").replace("kind: Playbook", "kind: Nope")
    body = error(api.post("/api/catalog/register", {"content": bad}), 422, "playbook_invalid")
    assert len(body["problems"]) >= 2
    assert any("shuot" in p for p in body["problems"]) and any(
        "kind" in p for p in body["problems"]
    )
    assert api.store.list_playbooks() == []


def test_register_with_a_wrong_body_is_a_validation_error(api: Api) -> None:
    body = error(api.post("/api/catalog/register", {"content": 5}), 422, "validation_error")
    assert body["errors"][0]["loc"] == ["body", "content"]
    error(api.post("/api/catalog/register", {}), 422, "validation_error")
    assert api.store.list_playbooks() == []


def test_list_shows_every_version_and_filters_by_path(api: Api) -> None:
    api.register(HELLO)
    api.register(HELLO + "\n# v2\n")
    api.register(LOOP)
    entries = ok(api.post("/api/catalog/list", {}, role="viewer"))["entries"]
    assert [(e["path"], e["version"]) for e in entries] == [
        ("tests/hello", 1),
        ("tests/hello", 2),
        ("tests/loop", 1),
    ]
    assert "content" not in entries[0]
    only = ok(api.post("/api/catalog/list", {"path": "tests/loop"}))["entries"]
    assert [e["catalog_id"] for e in only] == ["tests/loop@1"]


def test_resource_by_path_version_or_catalog_id(api: Api) -> None:
    api.register(HELLO)
    api.register(HELLO + "\n# v2\n")
    latest = ok(api.post("/api/catalog/resource", {"path": "tests/hello"}, role="worker"))
    assert latest["version"] == 2 and latest["content"].endswith("# v2\n")
    first = ok(api.post("/api/catalog/resource", {"path": "tests/hello", "version": 1}))
    assert first["content"] == HELLO
    by_id = ok(api.post("/api/catalog/resource", {"catalog_id": "tests/hello@1"}))
    assert by_id == first


def test_resource_of_an_unknown_entry_is_404_and_a_bad_reference_422(api: Api) -> None:
    api.register(HELLO)
    error(api.post("/api/catalog/resource", {"path": "nope"}), 404, "playbook_not_found")
    error(
        api.post("/api/catalog/resource", {"path": "tests/hello", "version": 9}),
        404,
        "playbook_not_found",
    )
    error(
        api.post("/api/catalog/resource", {"catalog_id": "tests/hello@9"}),
        404,
        "playbook_not_found",
    )
    body = error(
        api.post("/api/catalog/resource", {"catalog_id": "tests/hello"}), 422, "validation_error"
    )
    assert body["errors"][0]["loc"] == ["body", "catalog_id"]
    error(api.post("/api/catalog/resource", {}), 422, "validation_error")
    error(
        api.post("/api/catalog/resource", {"path": "x", "version": "two"}), 422, "validation_error"
    )


def test_strict_playbooks_refuses_a_playbook_with_warnings_naming_them(db_url: str) -> None:
    from tests.api.support import start_server

    typo = HELLO.replace("code: \"result = {'loud'", "cdoe: 1, code: \"result = {'loud'")
    with start_server(db_url, strict_playbooks=True) as strict:
        body = error(
            strict.post("/api/catalog/register", {"content": typo}), 422, "playbook_invalid"
        )
        assert any("tool field 'cdoe' is not a field of python" in p for p in body["problems"])
        assert strict.store.list_playbooks() == []
        assert strict.register(HELLO)["version"] == 1  # no warnings: registered
