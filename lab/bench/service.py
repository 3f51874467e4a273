"""One Seer app on a local Ray for a benchmark: deploy it (again, with another policy: a
``user_config`` change reconfigures the running scheduler, no engine restarts), send rollouts,
read what they did.

Invariant: every wait is bounded (``healthy_timeout_s`` for a deploy, ``rollout_timeout_s``
for a rollout); ``close`` stops Serve and the Ray this object started, nothing else.
"""

from __future__ import annotations

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
    """A local Ray + Serve with the Seer app on ``port`` (``app.serve.local.LocalService``; see
    the module invariant)."""

    def __init__(
        self,
        port: int,
        num_cpus: int | None = None,
        healthy_timeout_s: float = 900,
        rollout_timeout_s: float = 7200,
    ) -> None:
        import httpx

        from app.serve.local import LocalService

        self.healthy_timeout_s = healthy_timeout_s
        self.service = LocalService(port, num_cpus)
        self.url = self.service.url
        self.client = httpx.Client(base_url=self.url, timeout=rollout_timeout_s)

    def deploy(self, args: Any, policy: str) -> None:
        """Deploy the app (``args``: an ``AppConfig`` or its dict) and wait until it is healthy
        and runs ``policy``."""
        self.service.deploy(args, self.healthy_timeout_s, policy=policy)

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
        self.client.close()
        self.service.close()
