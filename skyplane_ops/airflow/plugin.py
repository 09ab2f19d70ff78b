"""An Airflow plugin that serves the plan, route and report files the extra links point at.

A ``file://`` link is dropped by the Airflow UI, so the "Skyplane plan", "Skyplane route"
and "Skyplane report" links were empty on a local work dir. The api-server serves them at
``/skyplane/files?uri=file:///...`` to a signed-in user (the UI's session cookie or a bearer
token: Airflow does not authenticate plugin apps, this one does), and only files of the kinds
the links name (plan JSON, route picture, report summary and rows) under the folders they are
written to (``<work_dir>/plans`` and ``$SKYPLANE_OPS_HOME/reports``, plus the folders listed in
``SKYPLANE_OPS_SERVE_DIRS``): never the state store, journals or secrets beside them.

The files must be on the api-server's host (one host, or a shared volume); a work dir or a
``report_uri`` in a bucket gives the cloud console's link instead.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

from airflow.plugins_manager import AirflowPlugin

from skyplane_ops.airflow.links import PREFIX
from skyplane_ops.airflow.settings import default_work_dir

_TYPES = {
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".parquet": "application/vnd.apache.parquet",
}


def served_roots() -> list[Path]:
    """The folders whose files the plugin serves (resolved)."""
    home = Path(os.environ.get("SKYPLANE_OPS_HOME") or Path.home() / ".skyplane-ops")
    roots = [Path(default_work_dir()) / "plans", home / "reports"]
    extra = os.environ.get("SKYPLANE_OPS_SERVE_DIRS", "")
    roots += [Path(p) for p in extra.split(os.pathsep) if p]
    return [r.expanduser().resolve() for r in roots]


def served_file(uri: str) -> Path | None:
    """The local file ``uri`` names if the plugin may serve it, else None."""
    parsed = urlparse(uri)
    if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
        return None
    path = Path(parsed.path).resolve()  # symbolic links and ".." resolved before the check
    if path.suffix not in _TYPES or not path.is_file():
        return None
    if not any(path.is_relative_to(root) for root in served_roots()):
        return None
    return path


def _app() -> object:
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi import Depends, FastAPI, HTTPException
    from fastapi.responses import FileResponse

    app = FastAPI(title="skyplane-ops files", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/files", dependencies=[Depends(get_user)])
    def files(uri: str) -> FileResponse:
        path = served_file(uri)
        if path is None:  # one answer for absent and refused: nothing to probe with
            raise HTTPException(status_code=404, detail="no such skyplane-ops file")
        return FileResponse(path, media_type=_TYPES[path.suffix])

    return app


class SkyplanePlugin(AirflowPlugin):
    """Registered by the ``airflow.plugins`` entry point of the package."""

    name = "skyplane_ops"
    fastapi_apps = [{"app": _app(), "url_prefix": PREFIX, "name": "skyplane-ops files"}]
