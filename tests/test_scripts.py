"""The two commands: shell syntax, and a second install run skips the work already done."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "script", ["run.sh", "test.sh", ".ci/run", "scripts/common.sh", "scripts/gpu_check.sh"]
)
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


def test_the_gpu_check_installs_nothing_and_says_what_is_missing(tmp_path: Path) -> None:
    """scripts/gpu_check.sh runs where vLLM for CUDA is installed already (a GPU machine with
    no network): it calls no installer, and without a GPU it stops at once saying so."""
    text = (ROOT / "scripts/gpu_check.sh").read_text()
    code = "\n".join(line.split("#")[0] for line in text.splitlines())
    for installer in ("pip install", "ensure_venv", "apt-get", "uv pip", "common.sh"):
        assert installer not in code, installer
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    (fake / "nvidia-smi").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "OUT": str(tmp_path / "out")}
    run = subprocess.run(
        ["bash", str(ROOT / "scripts/gpu_check.sh")],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 1 and "no GPU: nvidia-smi failed" in run.stderr, run.stderr


def test_the_gpu_check_names_what_the_environment_lacks(tmp_path: Path) -> None:
    """With a GPU reported but this CPU venv as its Python, the check stops before it serves,
    naming what it needs (a CUDA torch) instead of installing anything."""
    import sys

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA H100, 81559 MiB'\n")
    (fake / "nvidia-smi").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{fake}:{os.environ['PATH']}",
        "OUT": str(tmp_path / "out"),
        "SEER_PYTHON": sys.executable,
    }
    run = subprocess.run(
        ["bash", str(ROOT / "scripts/gpu_check.sh")],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert "lacks what the GPU check needs (nothing was installed)" in run.stderr
    assert "a CUDA build of torch that sees the GPU" in run.stderr, run.stderr
    assert not (tmp_path / "out" / "gpu_check" / "serve.log").exists()  # it never served
