"""The Compute Engine API as the gcp backend uses it: REST clients, operations, errors."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision.cloudvm.common import QuotaError

CAPACITY_CODES = {"ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"}
QUOTA_CODES = {"QUOTA_EXCEEDED", "quotaExceeded"}


class NoCapacity(ProvisionError):
    """This zone has no capacity for the machine type: the next zone is tried."""


class ComputeAPI:
    """One REST client per kind (thread-safe), waiting on operations with clear errors."""

    def __init__(
        self,
        credentials: Any,
        credentials_file: str | None,
        endpoint: str | None,
        op_timeout: float,
    ) -> None:
        from google.cloud import compute_v1  # lazily: only this backend needs it

        self.compute = compute_v1
        if credentials == "anonymous":  # emulators and fakes only
            from google.auth.credentials import AnonymousCredentials

            credentials = AnonymousCredentials()
        if credentials is None and credentials_file:
            from google.oauth2 import service_account

            credentials = service_account.Credentials.from_service_account_file(
                credentials_file, scopes=["https://www.googleapis.com/auth/compute"]
            )
        kw: dict[str, Any] = {"credentials": credentials, "transport": "rest"}
        if endpoint:
            kw["client_options"] = {"api_endpoint": endpoint}
        self._kw = kw
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.op_timeout = op_timeout

    def client(self, kind: str) -> Any:
        with self._lock:
            if kind not in self._clients:
                client = getattr(self.compute, kind)(**self._kw)
                if "client_options" in self._kw and not kind.endswith("OperationsClient"):
                    self._route_operations(client)
                self._clients[kind] = client
            return self._clients[kind]

    def _route_operations(self, client: Any) -> None:
        """The SDK polls operations with clients it builds WITHOUT our ``api_endpoint``
        (google-cloud-compute's transports pass only the credentials): hand it ours."""
        services = getattr(client._transport, "_extended_operations_services", None)
        if isinstance(services, dict):
            for key, kind in (
                ("global_operations", "GlobalOperationsClient"),
                ("region_operations", "RegionOperationsClient"),
                ("zone_operations", "ZoneOperationsClient"),
            ):
                services[key] = getattr(self.compute, kind)(**self._kw)

    def wait(self, op: Any, what: str, region: str) -> None:
        """Block on a Compute operation; quota and capacity errors say where and which."""
        from google.api_core.exceptions import GoogleAPICallError

        try:
            op.result(timeout=self.op_timeout)
        except GoogleAPICallError as exc:
            codes = {e.code for e in getattr(getattr(op, "error", None), "errors", []) or []}
            if codes & CAPACITY_CODES:
                raise NoCapacity(str(exc)) from exc
            if codes & QUOTA_CODES or "quota" in str(exc).lower():
                raise QuotaError(
                    f"gcp {region}: quota exceeded while creating {what}: {exc}"
                ) from exc
            raise

    def mutate(self, kind: str, method: str, attempts: int = 3, **fields: Any) -> Any:
        """Call a mutating method; when its answer is lost (5xx, dropped connection) call again
        with the SAME ``request_id``, which Compute de-duplicates: created exactly once."""
        from google.api_core.exceptions import ServerError
        from requests.exceptions import ConnectionError as RequestsConnectionError

        request = {**fields, "request_id": str(uuid.uuid4())}
        for attempt in range(1, attempts + 1):
            try:
                return getattr(self.client(kind), method)(request=request)
            except (ServerError, RequestsConnectionError):
                if attempt == attempts:
                    raise
                time.sleep(0.5 * attempt)
        raise AssertionError("unreachable")

    def delete(self, op_factory: Callable[[], Any], what: str, region: str) -> bool:
        from google.api_core.exceptions import NotFound

        try:
            self.wait(op_factory(), what, region)
            return True
        except NotFound:
            return False
