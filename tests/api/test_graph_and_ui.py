"""The web UI's reads: a run's graph (`GET /api/executions/{id}/graph`), the caller's role
(`GET /api/whoami`) and the built files served at /ui/ (`milepost.api.routers.ui`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from milepost.api.errors import ApiError
from milepost.api.routers import ui
from tests.api.support import HELLO, LOOP, Api, error, ok


def _nodes(api: Api, xid: str) -> dict[str, dict[str, object]]:
    graph = ok(api.get(f"/api/executions/{xid}/graph", role="viewer"))
    return {n["id"]: n for n in graph["nodes"]}


def test_the_graph_has_one_node_per_step_and_the_arcs(api: Api) -> None:
    xid = api.execute(HELLO)
    graph = ok(api.get(f"/api/executions/{xid}/graph", role="viewer"))
    assert graph["entry_step"] == "start"
    assert [(n["id"], n["kind"], n["loop"]) for n in graph["nodes"]] == [
        ("start", "python", False),
        ("shout", "python", False),
    ]
    assert [(e["source"], e["target"], e["kind"]) for e in graph["edges"]] == [
        ("start", "shout", "next")
    ]
    nodes = {n["id"]: n for n in graph["nodes"]}
    assert nodes["start"]["status"] == "RUNNING"
    assert nodes["shout"]["status"] == "PENDING"  # not started yet
    assert nodes["start"]["iterations"] is None


def test_a_loop_step_is_one_node_counting_its_iterations(api: Api) -> None:
    xid = api.execute(LOOP)
    commands = api.claim_next(limit=3)
    assert len(commands) == 3
    api.complete(commands[0], 10)
    each = _nodes(api, xid)["each"]
    assert each["loop"] is True
    assert each["status"] == "RUNNING"
    assert each["iterations"] == {"total": 3, "done": 1, "running": 2, "failed": 0}
    for command in commands[1:]:
        api.complete(command, 20)
    each = _nodes(api, xid)["each"]
    assert each["status"] == "COMPLETED"
    assert each["iterations"] == {"total": 3, "done": 3, "running": 0, "failed": 0}
    assert len(_nodes(api, xid)) == 2  # never one node per iteration


def test_the_graph_of_an_unknown_run_is_404(api: Api) -> None:
    error(api.get("/api/executions/999/graph"), 404, "execution_not_found")


def test_whoami_names_the_role_and_what_it_may_do(api: Api) -> None:
    viewer = ok(api.get("/api/whoami", role="viewer"))
    assert viewer["role"] == "viewer" and viewer["name"] == "test-viewer"
    assert viewer["may"] == {"cancel": False, "execute": False, "act": False, "approve": False}
    operator = ok(api.get("/api/whoami", role="operator"))
    assert operator["may"]["cancel"] is True and operator["may"]["approve"] is False
    assert ok(api.get("/api/whoami", role="approver"))["may"]["approve"] is True


def test_the_root_redirects_to_the_ui(api: Api) -> None:
    response = api.client.get("/", follow_redirects=False)
    assert response.status_code == 307 and response.headers["location"] == "/ui/"


def test_client_routes_get_the_index_and_assets_are_files(tmp_path: Path) -> None:
    (tmp_path / "assets").mkdir()
    (tmp_path / "index.html").write_text("<html>app</html>")
    (tmp_path / "assets" / "app-1.js").write_text("js")
    for path in ("", "runs", "runs/12"):
        response = ui.serve(tmp_path, path)
        assert Path(response.path).name == "index.html", path
        assert response.headers["cache-control"] == "no-cache"
    asset = ui.serve(tmp_path, "assets/app-1.js")
    assert Path(asset.path).name == "app-1.js"
    assert "immutable" in asset.headers["cache-control"]


def test_a_missing_asset_or_a_path_outside_is_404(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("<html>app</html>")
    for path in ("assets/gone.js", "../secret"):
        with pytest.raises(ApiError) as refused:
            ui.serve(tmp_path, path)
        assert refused.value.status == 404, path


def test_an_unbuilt_ui_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(ApiError) as refused:
        ui.serve(tmp_path, "")
    assert refused.value.code == "ui_not_built"
    assert "make install" in refused.value.message
