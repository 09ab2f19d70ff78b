"""Extra links on the transfer tasks: the stored plan, the route diagram and the report.

Airflow 3 resolves a link from the XCom the task pushed under the link's ``xcom_key``, so
the operators push the finished URL (``persist``) and the UI reads it back. The route link
opens the route picture the hook stored next to the plan (``api.route_svg``, the renderer the
CLI and the Dagster metadata use) when the task stored the plan itself; otherwise the
planner's Mermaid diagram in mermaid.live (the diagram travels in the URL fragment, which
browsers do not send to the server).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

from airflow.sdk import BaseOperatorLink

_CONSOLES = {
    "s3": "https://s3.console.aws.amazon.com/s3/object/{bucket}?prefix={key}",
    "gs": "https://console.cloud.google.com/storage/browser/_details/{bucket}/{key}",
}


# Where the package's Airflow plugin (``airflow/plugin.py``) serves local files on the
# api-server: the UI drops ``file://`` links.
PREFIX = "/skyplane"


def served_url(uri: str) -> str:
    """The UI's URL of a local file: the plugin's route (absolute with ``[api] base_url``)."""
    try:
        from airflow.configuration import conf

        base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
    except Exception:  # no configuration (a script): a path on the api-server
        base = ""
    return f"{base}{PREFIX}/files?uri={quote(uri, safe='')}"


def plan_url(plan_uri: str) -> str:
    """A browser URL for a stored plan, route or report: the cloud console's object page, the
    plugin's route for a local file, else the URI."""
    parsed = urlparse(plan_uri)
    if parsed.scheme in _CONSOLES:
        return _CONSOLES[parsed.scheme].format(bucket=parsed.netloc, key=parsed.path.lstrip("/"))
    if parsed.scheme == "":
        return served_url(Path(plan_uri).absolute().as_uri())
    if parsed.scheme == "file":
        return served_url(plan_uri)
    return plan_uri


def route_uri_for(plan_uri: str) -> str:
    """Where the route picture of the plan stored at ``plan_uri`` lives (``x.json`` ->
    ``x.route.svg``)."""
    stem = plan_uri[: -len(".json")] if plan_uri.endswith(".json") else plan_uri
    return stem + ".route.svg"


def route_url(mermaid: str) -> str:
    """A mermaid.live view of the route (the diagram is in the fragment only)."""
    state = json.dumps({"code": mermaid, "mermaid": {"theme": "default"}})
    return "https://mermaid.live/view#base64:" + base64.urlsafe_b64encode(state.encode()).decode()


class _XComLink(BaseOperatorLink):
    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        from airflow.sdk import BaseXCom

        value = BaseXCom.get_value(ti_key=ti_key, key=self.xcom_key)
        return str(value) if value else ""

    @classmethod
    def persist(cls, context: Any, url: str | None) -> None:
        ti = context.get("ti")
        if ti is not None and url:
            ti.xcom_push(key=cls().xcom_key, value=url)


class SkyplanePlanLink(_XComLink):
    """The full plan JSON the plan step stored."""

    name = "Skyplane plan"


class SkyplaneRouteLink(_XComLink):
    """The overlay route as a diagram."""

    name = "Skyplane route"


class SkyplaneReportLink(_XComLink):
    """The transfer report's summary (every object's outcome is in the Parquet file beside
    it)."""

    name = "Skyplane report"


def persist_links(
    context: Any, plan_uri: str | None, plan: Any | None, *, route_stored: bool = False
) -> None:
    """Push both links' URLs for this task instance (best effort: links are no result).

    ``route_stored``: the plan was stored by ``SkyplaneHook.write_plan`` in this task, so its
    route picture is next to it."""
    if plan_uri:
        SkyplanePlanLink.persist(context, plan_url(plan_uri))
    if plan_uri and route_stored:
        SkyplaneRouteLink.persist(context, plan_url(route_uri_for(plan_uri)))
    elif plan is not None:
        SkyplaneRouteLink.persist(context, route_url(plan.to_mermaid()))
