"""app.env: the environment an engine process gets before vLLM and torch load."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_PROBE = (
    "import os, sys\n"
    "from app.env import apply_engine_env\n"
    "arg = sys.argv[1]\n"
    "apply_engine_env(True, 1.5, None if arg == 'none' else int(arg))\n"
    "import torch\n"
    "print(os.environ.get('VLLM_CPU_OMP_THREADS_BIND'), os.environ['VLLM_CPU_KVCACHE_SPACE'],"
    " torch.get_num_threads())\n"
)


@pytest.mark.parametrize(
    ("threads", "bind", "torch_threads"), [("1", "nobind", 1), ("none", "None", None)]
)
@pytest.mark.parametrize("mkl", [None, "2"])
def test_cpu_threads_set_torch_s_threads_and_turn_vllm_s_pinning_off(
    threads: str, bind: str, torch_threads: int | None, mkl: str | None
) -> None:
    ours = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "VLLM_CPU_OMP_THREADS_BIND")
    env = {k: v for k, v in os.environ.items() if k not in ours}
    if mkl is not None:  # a process that inherited MKL's setting (torch sizes its pool by it)
        env["MKL_NUM_THREADS"] = mkl
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, threads], capture_output=True, text=True, timeout=120,
        env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    got_bind, kv, got_threads = out.stdout.split()
    assert got_bind == bind and kv == "2"  # the KV size rounds up to whole GiB
    if torch_threads is None:  # null leaves torch (and vLLM's binding) at its default
        plain = subprocess.run(
            [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
        torch_threads = int(plain.stdout)
    assert int(got_threads) == torch_threads


def test_what_the_environment_gives_travels_in_the_deployed_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``seer serve`` deploys ``AppConfig.with_environment()``: deployments on other nodes
    read their raylet's environment, so the URL and token it resolved are written in, and
    what the config sets itself wins."""
    from app.config import AppConfig

    monkeypatch.setenv("SEER_DATABASE_URL", "postgresql+psycopg://seer@db:5432/seer")
    monkeypatch.setenv("SEER_OPERATOR_TOKEN", "env-token")
    got = AppConfig().with_environment()
    assert got.store.database_url == "postgresql+psycopg://seer@db:5432/seer"
    assert got.operator_token is not None and got.operator_token.get_secret_value() == "env-token"
    own = AppConfig.model_validate(
        {"operator_token": "mine", "store": {"database_url": "sqlite:////tmp/own.db"}}
    ).with_environment()
    assert own.store.database_url == "sqlite:////tmp/own.db"
    assert own.operator_token is not None and own.operator_token.get_secret_value() == "mine"
    monkeypatch.delenv("SEER_DATABASE_URL")
    monkeypatch.delenv("SEER_OPERATOR_TOKEN")
    plain = AppConfig()
    assert plain.with_environment() is plain
