"""Ray Serve options shared by the one-replica control deployments (scheduler, draft server).

Both keep process-local state every caller must see (one replica), take a quarter CPU (2-core
machines run them beside the engines and the ingress), and accept many concurrent calls (every
chunk result, exchange or status read is one)."""

from __future__ import annotations

from typing import Any

SINGLETON: dict[str, Any] = {
    "num_replicas": 1,
    "ray_actor_options": {"num_cpus": 0.25},
    "max_ongoing_requests": 10_000,
    "health_check_period_s": 10,
    "health_check_timeout_s": 30,
}
