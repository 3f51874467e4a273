"""One Seer app on a local Ray for a benchmark: deploy it (again, with another policy: a
``user_config`` change reconfigures the running scheduler, no engine restarts), send rollouts,
read what they did.

Invariant: every wait is bounded (``healthy_timeout_s`` for a deploy, ``rollout_timeout_s``
for a rollout); ``close`` stops Serve and the Ray this object started, nothing else.
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class RolloutRun:
    """One finished rollout as the benchmark measures it: each response's
    ``finished_after_s`` (since the job started), its length and its token ids (group by group,
    in the order of the prompts), the job's policy."""

    policy: str
    ends: list[float]
    lengths: list[int]
    token_ids: list[list[int]]

    @property
    def makespan_s(self) -> float:
        return max(self.ends)

    @property
    def output_tokens(self) -> int:
        return sum(self.lengths)


class ServiceBench:
    """A local Ray + Serve with the Seer app on ``port`` (see the module invariant)."""

    def __init__(
        self,
        port: int,
        num_cpus: int | None = None,
        healthy_timeout_s: float = 900,
        rollout_timeout_s: float = 7200,
    ) -> None:
        import httpx
        import ray
        from ray import serve

        self.url = f"http://127.0.0.1:{port}"
        self.healthy_timeout_s = healthy_timeout_s
        self.rollout_timeout_s = rollout_timeout_s
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
        try:
            serve.start(http_options={"host": "127.0.0.1", "port": port})
        except BaseException:
            ray.shutdown()
            raise
        self.client = httpx.Client(base_url=self.url, timeout=rollout_timeout_s)

    def deploy(self, args: Any, policy: str) -> None:
        """Deploy the app (``args``: an ``AppConfig`` or its dict) and wait until it is healthy
        and runs ``policy``."""
        import httpx
        from ray import serve

        from app.serve.builder import build_app

        serve.run(build_app(args), name="seer", route_prefix="/", blocking=False)
        deadline = time.monotonic() + self.healthy_timeout_s
        while True:
            try:
                h = self.client.get("/healthz", timeout=10)
                if h.status_code == 200 and (h.json()["policy"], h.json()["status"]) == (
                    policy,
                    "ok",
                ):
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the app did not become healthy with policy {policy} within "
                    f"{self.healthy_timeout_s:g} s"
                )
            time.sleep(0.5)

    def rollout(self, body: dict[str, Any]) -> RolloutRun:
        """POST ``body`` to /v1/rollouts and wait for it (``wait`` is set here)."""
        r = self.client.post("/v1/rollouts", json={**body, "wait": True})
        if r.status_code != 200:
            raise RuntimeError(f"rollout: HTTP {r.status_code}: {r.text[:1000]}")
        out = r.json()
        resp = [x for g in out["groups"] for x in g["responses"]]
        return RolloutRun(
            out["policy"],
            [x["finished_after_s"] for x in resp],
            [x["length"] for x in resp],
            [x["token_ids"] for x in resp],
        )

    def metrics_text(self) -> str:
        return str(self.client.get("/metrics").text)

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
