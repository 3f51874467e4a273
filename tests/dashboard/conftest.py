"""Stores and a fake service for the dashboard tests: a SQLite store filled through
``app.store``'s writer with synthetic history, and an HTTP service on loopback that answers
like the real one (the real operator rules: bearer token, merge, 422) for ``/healthz`` and
``/v1/speculation``."""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, Header

from app.api import (
    EngineLoad,
    ReplicaHealth,
    ReplicaSpeculation,
    ReplicaState,
    ServiceHealth,
    SpeculationState,
    SpeculationUpdate,
)
from app.serve.ingress.auth import authorize, settings_patch
from core.drafting.step_drafter import DraftSettings
from lab.bench.dashboard_refresh import fill
from lab.bench.synthetic_history import Shape
from tests.conftest import free_port

SMALL = Shape(jobs=3, groups=8, group_size=4, max_tokens=256, chunk_tokens=32, replicas=2)


@pytest.fixture(scope="session")
def filled_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Three jobs of 8 groups x 4 (the last one half done), one settings change."""
    url = f"sqlite:///{tmp_path_factory.mktemp('dash') / 'seer.db'}"
    fill(url, SMALL, seed=1)
    return url


@pytest.fixture
def empty_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'nothing-here.db'}"


class FakeService:
    """What the dashboard calls, on 127.0.0.1 (uvicorn in a thread)."""

    def __init__(self, token: str) -> None:
        self.puts: list[tuple[dict[str, Any], str | None, str | None]] = []
        self.state = SpeculationState(
            settings=dataclasses.asdict(DraftSettings()),
            version=0,
            replicas=[ReplicaSpeculation(replica_id="replica-0", version=0)],
        )
        api = FastAPI()

        @api.get("/healthz")
        def healthz() -> ServiceHealth:
            load = EngineLoad(replica_id="replica-0", running=3, waiting=1, kv_usage=0.5)
            replica = ReplicaHealth(
                replica_id="replica-0",
                node_id="node-0",
                gpu_ids=[],
                state=ReplicaState.HEALTHY,
                since=time.time(),
                failures=0,
                error=None,
                load=load,
                reserved_kv_tokens=0,
            )
            return ServiceHealth(
                status="ok",
                policy="seer",
                logprobs_mode="raw",
                accepting=True,
                open_jobs=1,
                scheduler_node_id="node-0",
                replicas=[replica],
            )

        @api.get("/v1/speculation")
        def get_spec() -> SpeculationState:
            return self.state

        @api.put("/v1/speculation")
        def put_spec(
            update: SpeculationUpdate,
            authorization: str | None = Header(None),
            x_operator: str | None = Header(None),
        ) -> SpeculationState:
            authorize(token, authorization)
            new = dataclasses.replace(
                DraftSettings(**self.state.settings), **settings_patch(update)
            )
            self.puts.append((update.settings, x_operator, update.reason))
            self.state = self.state.model_copy(
                update={
                    "settings": dataclasses.asdict(new),
                    "version": self.state.version + 1,
                    "updated_by": x_operator,
                    "reason": update.reason,
                }
            )
            return self.state

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = uvicorn.Config(api, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("fake service did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture
def fake_service() -> Iterator[FakeService]:
    svc = FakeService(token="s3cret")
    yield svc
    svc.stop()


@pytest.fixture
def down_url() -> str:
    """A loopback port nobody listens on."""
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture(autouse=True)
def _keep_main_module() -> Iterator[None]:
    """Streamlit's script runner (``AppTest``) makes the page script ``sys.modules["__main__"]``
    and leaves it there; a process spawned later in the session (vLLM's engine core) would then
    import that script as its main module and die (``NameError: __args``)."""
    main = sys.modules["__main__"]
    yield
    sys.modules["__main__"] = main
