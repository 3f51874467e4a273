"""A Seer service on this machine, for one process: a local Ray, Serve on 127.0.0.1, the app
deployed and healthy. The GRPO example, the lab's benchmarks and the tests start it so.

Invariants: every wait is bounded (``deploy`` by ``timeout_s``); ``close`` stops the Serve
instance and the Ray this object started, nothing else (never a machine-wide Ray). Health is
read through ``SeerClient``, the service's own typed client.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx

from app.client import SeerClient
from app.client.errors import SeerError

#: how often ``deploy`` asks ``/healthz`` while replicas start
_POLL_S = 0.5
#: how often ``deploy`` reports that replicas are still starting (when given ``say``)
_SAY_EVERY_S = 15.0


class LocalService:
    """A local Ray with Serve listening on ``port`` (see the module invariants)."""

    def __init__(self, port: int, num_cpus: int | None = None) -> None:
        from app.env import DRIVER_ENV, apply

        apply(DRIVER_ENV)  # before Ray is imported
        import ray
        from ray import serve

        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
        try:
            serve.start(http_options={"host": "127.0.0.1", "port": port})
        except BaseException:
            ray.shutdown()
            raise
        self.client = SeerClient(self.url, timeout=30.0)

    def deploy(
        self,
        args: Any,
        timeout_s: float = 900.0,
        policy: str | None = None,
        say: Callable[[str], None] | None = None,
        name: str = "seer",
    ) -> str:
        """Deploy (or redeploy) the Seer app (``args``: an ``AppConfig`` or its dict) as
        ``name`` at ``/`` and wait until every replica is healthy and, when given, it runs
        ``policy``; returns the service's URL. TimeoutError past ``timeout_s``."""
        from ray import serve

        from app.serve.builder import build_app

        serve.run(build_app(args), name=name, route_prefix="/", blocking=False)
        t0 = time.monotonic()
        told = t0
        while True:
            # not up yet: no answer, or Serve's own 404/503 (not a health body) before the app
            with contextlib.suppress(httpx.HTTPError, SeerError, ValueError):
                health = self.client.health()
                if health.status == "ok" and policy in (None, health.policy):
                    return self.url
            now = time.monotonic()
            if now - t0 > timeout_s:
                wanted = f" with policy {policy}" if policy is not None else ""
                raise TimeoutError(f"the Seer app was not healthy{wanted} within {timeout_s:g} s")
            if say is not None and now - told >= _SAY_EVERY_S:
                say(f"  ... replicas still starting ({now - t0:.0f} s)")
                told = now
            time.sleep(_POLL_S)

    def delete(self, name: str = "seer") -> None:
        """Take the app ``name`` down (Serve and Ray stay up for the next deploy)."""
        from ray import serve

        serve.delete(name)

    def close(self) -> None:
        import ray
        from ray import serve

        self.client.close()
        # Ray prints its shutdown warnings ("(raylet) Task ... failed") on stdout, where a
        # benchmark's --json goes: they go to stderr
        with contextlib.redirect_stdout(sys.stderr):
            try:
                serve.shutdown()
            finally:
                ray.shutdown()

    def __enter__(self) -> LocalService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
