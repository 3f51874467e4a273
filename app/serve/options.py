"""Ray Serve options shared by the one-replica control deployments (scheduler, draft server).

Both keep process-local state every caller must see (one replica), take a quarter CPU (2-core
machines run them beside the engines and the ingress), and accept many concurrent calls (every
chunk result, exchange or status read is one).

``HOT_PATH_LOGGING``: the deployments called once per chunk or per draft exchange (engine
replicas, scheduler, draft server) write no Serve access-log line per call: at ~100 calls/s
formatting and writing them was ~15% of a sim engine replica's request handling and ~20% of the
draft server's (py-spy, 8-replica ``seer-lab e2e``). Errors are still logged; the ingress keeps its
access log (one line per HTTP request)."""

from __future__ import annotations

from typing import Any

HOT_PATH_LOGGING: dict[str, Any] = {"enable_access_log": False}

SINGLETON: dict[str, Any] = {
    "num_replicas": 1,
    "ray_actor_options": {"num_cpus": 0.25},
    "max_ongoing_requests": 10_000,
    "health_check_period_s": 10,
    "health_check_timeout_s": 30,
    "logging_config": HOT_PATH_LOGGING,
}
