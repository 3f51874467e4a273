"""The dashboard's only way to the service: its HTTP API (health, speculation settings, job
status), every call bounded by ``timeout_s``. Failures are typed: ``ServiceUnreachable`` (no
answer) and ``ServiceError`` (an answer with an error status, its detail as text)."""

from __future__ import annotations

import json
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from app.api import JobStatus, SpeculationState
from core.engine import EngineLoad

M = TypeVar("M", bound=BaseModel)


class ServiceUnreachable(RuntimeError):
    """No (usable) answer from the service."""


class ServiceError(RuntimeError):
    """The service answered with an error status."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


class ReplicaStatus(BaseModel):
    model_config = ConfigDict(extra="ignore")

    replica_id: str
    state: str
    error: str | None = None
    load: EngineLoad | None = None


class Health(BaseModel):
    """What the dashboard shows of ``GET /healthz``."""

    model_config = ConfigDict(extra="ignore")

    status: str  # ok | degraded | unavailable
    policy: str
    accepting: bool
    open_jobs: int
    replicas: list[ReplicaStatus]


class ServiceClient:
    def __init__(self, base_url: str, timeout_s: float = 3.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s)

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, ok: tuple[int, ...] = (200,), **kw: Any) -> Any:
        try:
            r = self._http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise ServiceUnreachable(
                f"service at {self.base_url} unreachable: {type(exc).__name__}: {exc}"
            ) from None
        if r.status_code not in ok:
            raise ServiceError(r.status_code, _detail(r))
        try:
            return r.json()
        except json.JSONDecodeError:
            raise ServiceUnreachable(f"{method} {path}: answer is not JSON") from None

    def health(self) -> Health:
        """``GET /healthz`` (a 503 while no replica is in rotation is still an answer)."""
        return _parse(Health, self._call("GET", "/healthz", ok=(200, 503)))

    def speculation(self) -> SpeculationState:
        return _parse(SpeculationState, self._call("GET", "/v1/speculation"))

    def set_speculation(
        self, settings: dict[str, Any], token: str, who: str | None, reason: str | None
    ) -> SpeculationState:
        """``PUT /v1/speculation`` with the operator token (401/403/422: ``ServiceError``)."""
        headers = {"Authorization": f"Bearer {token}"}
        if who:
            headers["X-Operator"] = who
        body = {"settings": settings, "reason": reason or None}
        return _parse(
            SpeculationState, self._call("PUT", "/v1/speculation", json=body, headers=headers)
        )

    def job(self, job_id: str) -> JobStatus:
        return _parse(JobStatus, self._call("GET", f"/v1/rollouts/{job_id}"))


def _parse(model: type[M], data: Any) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ServiceUnreachable(f"unexpected answer for {model.__name__}: {exc}") from None


def _detail(r: httpx.Response) -> str:
    """The ``detail`` of a FastAPI error (422s: "field: message" per error), else the text."""
    try:
        detail = r.json().get("detail")
    except (json.JSONDecodeError, AttributeError):
        return r.text[:500]
    if isinstance(detail, list):
        parts = []
        for err in detail:
            loc = [str(x) for x in err.get("loc", []) if x not in ("body", "settings")]
            parts.append(f"{'.'.join(loc) or 'request'}: {err.get('msg', err)}")
        return "; ".join(parts)
    return str(detail)
