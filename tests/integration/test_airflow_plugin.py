"""The Airflow plugin that serves the extra links' local files (issue 41): the UI drops
``file://`` links, so the api-server serves plans, route pictures and reports, to signed-in
users only, and nothing else under the work dir (state, journals, secrets). Real FastAPI app
and Airflow's own auth manager and JWTs; no Airflow server process is needed for a route."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from skyplane_ops.airflow.links import plan_url, served_url


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SKYPLANE_OPS_HOME", str(tmp_path))
    monkeypatch.delenv("SKYPLANE_OPS_SERVE_DIRS", raising=False)
    return tmp_path


@pytest.fixture(scope="module")
def client() -> TestClient:
    from skyplane_ops.airflow.plugin import SkyplanePlugin

    (entry,) = SkyplanePlugin.fastapi_apps
    assert entry["url_prefix"] == "/skyplane"
    return TestClient(entry["app"])


@pytest.fixture(scope="module")
def token(airflow_db: str) -> str:
    from airflow.api_fastapi.app import create_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    manager = create_auth_manager()
    return str(manager.generate_jwt(SimpleAuthManagerUser(username="viewer", role="viewer")))


def _get(client: TestClient, uri: str, token: str | None) -> Any:
    path = served_url(uri).split("/skyplane", 1)[1]  # the app is mounted at /skyplane
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return client.get(path, headers=headers)


def test_links_to_local_files_are_served_to_signed_in_users(
    home: Path, client: TestClient, token: str
) -> None:
    plans = home / "airflow" / "plans"
    plans.mkdir(parents=True)
    (plans / "t-1.json").write_text('{"paths": []}')
    (plans / "t-1.route.svg").write_text("<svg/>")
    report = home / "reports" / "t-1" / "job-1" / "summary.json"
    report.parent.mkdir(parents=True)
    report.write_text('{"outcomes": {}}')
    url = plan_url(str(plans / "t-1.json"))
    assert url.startswith("/skyplane/files?uri=file%3A%2F%2F"), url  # not a file:// link
    assert _get(client, (plans / "t-1.json").as_uri(), None).status_code == 401
    ok = _get(client, (plans / "t-1.json").as_uri(), token)
    assert ok.status_code == 200 and ok.json() == {"paths": []}
    svg = _get(client, (plans / "t-1.route.svg").as_uri(), token)
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    assert _get(client, report.as_uri(), token).json() == {"outcomes": {}}
    forged = _get(client, (plans / "t-1.json").as_uri(), token[:-4] + "AAAA")
    assert forged.status_code in (401, 403)


def test_nothing_else_under_the_work_dir_is_served(
    home: Path, client: TestClient, token: str
) -> None:
    plans = home / "airflow" / "plans"
    plans.mkdir(parents=True)
    secret = home / "airflow" / "state" / "t-1" / "secret.json"
    secret.parent.mkdir(parents=True)
    secret.write_text('{"secret": "s3cr3t"}')
    (plans / "escape.json").symlink_to(secret)
    (plans / "notes.txt").write_text("x")
    outside = home / "elsewhere.json"
    outside.write_text("{}")
    for uri in (
        secret.as_uri(),
        (plans / "escape.json").as_uri(),  # a symbolic link out of the served folders
        f"file://{plans}/../state/t-1/secret.json",
        (plans / "notes.txt").as_uri(),  # not a kind the links name
        outside.as_uri(),
        (plans / "missing.json").as_uri(),
        "s3://bucket/plans/t-1.json",
        "file://otherhost/etc/passwd.json",
    ):
        answer = _get(client, uri, token)
        assert answer.status_code == 404, uri
        assert "s3cr3t" not in answer.text


def test_the_plugin_is_registered_with_airflow() -> None:
    found = {e.name: e.value for e in importlib.metadata.entry_points(group="airflow.plugins")}
    assert found.get("skyplane_ops") == "skyplane_ops.airflow.plugin:SkyplanePlugin"
    airflow_bin = Path(sys.executable).with_name("airflow")
    out = subprocess.run(
        [str(airflow_bin), "plugins", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    ).stdout
    (ours,) = [p for p in json.loads(out) if p["name"] == "skyplane_ops"]
    assert [a["url_prefix"] for a in ours["fastapi_apps"]] == ["/skyplane"]
