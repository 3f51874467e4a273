"""The two commands: shell syntax, and a second install run skips the work already done."""

from __future__ import annotations

import os
import subprocess
import threading
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


def test_run_sh_stop_stops_the_dashboard_and_the_app(tmp_path: Path) -> None:
    """``./run.sh stop`` ends both processes named in the pid files (stand-ins here, in a run
    dir of their own) and removes the files; a second stop is a no-op."""
    procs = {}
    for name in ("serve", "dashboard"):
        procs[name] = subprocess.Popen(["sleep", "300"])
        # reaped as soon as it ends (a zombie would still answer run.sh's kill -0)
        threading.Thread(target=procs[name].wait, daemon=True).start()
        (tmp_path / f"{name}.pid").write_text(f"{procs[name].pid}\n")
    try:
        env = {**os.environ, "SEER_RUN_DIR": str(tmp_path)}
        first = subprocess.run(
            [str(ROOT / "run.sh"), "stop"], capture_output=True, text=True, timeout=60, env=env
        )
        assert first.returncode == 0, first.stderr
        assert "stopping dashboard" in first.stderr and "stopping Serve app" in first.stderr
        for name, p in procs.items():
            assert p.wait(10) == -15, name  # SIGTERM
            assert not (tmp_path / f"{name}.pid").exists()
        again = subprocess.run(
            [str(ROOT / "run.sh"), "stop"], capture_output=True, text=True, timeout=60, env=env
        )
        assert again.returncode == 0 and "stopping" not in again.stderr
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
