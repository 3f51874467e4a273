"""The two commands: shell syntax, and a second install run skips the work already done."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script", ["run.sh", "test.sh", ".ci/run", "scripts/common.sh"])
def test_scripts_parse(script: str) -> None:
    subprocess.run(["bash", "-n", str(ROOT / script)], check=True, timeout=30)


def test_ci_runs_test_sh_with_ci_true() -> None:
    text = (ROOT / ".ci/run").read_text()
    assert "CI=true" in text and "./test.sh" in text


def test_second_install_is_skipped() -> None:
    stamp = ROOT / ".venv/.seer-install-stamp"
    if not stamp.is_file():
        pytest.skip("the venv was not made by scripts/common.sh (run ./test.sh)")
    before = stamp.stat().st_mtime_ns
    out = subprocess.run(
        ["bash", "-c", f"source {ROOT}/scripts/common.sh && ensure_venv"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "venv up to date" in out.stderr, out.stderr
    assert stamp.stat().st_mtime_ns == before


def test_run_sh_stop_without_app_is_a_noop(tmp_path: Path) -> None:
    out = subprocess.run([str(ROOT / "run.sh"), "stop"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
