"""The ``seer`` and ``seer-lab`` console scripts: every command has --help, a command moved to
the lab says where it went; prepare-model reports errors."""

from __future__ import annotations

import inspect
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from app.cli import MOVED_TO_LAB, cli
from lab.cli import cli as lab_cli

CLIS = {"seer": cli, "seer-lab": lab_cli}
COMMANDS = [(n, c.name) for n, app in CLIS.items() for c in app.registered_commands if not c.hidden]


def test_expected_commands_registered() -> None:
    assert {("seer", "prepare-model"), ("seer", "demo"), ("seer-lab", "replay")} <= set(COMMANDS)
    assert ("seer", "replay") not in COMMANDS  # moved to the laboratory


@pytest.mark.parametrize(("program", "command"), COMMANDS)
def test_help_of_every_command(program: str, command: str) -> None:
    result = CliRunner().invoke(CLIS[program], [command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


@pytest.mark.parametrize("command", MOVED_TO_LAB)
def test_a_command_moved_to_the_lab_says_where_it_went(command: str) -> None:
    result = CliRunner().invoke(cli, [command, "--json", "x"])
    assert result.exit_code == 2
    assert f"`seer {command}` moved to the laboratory: run `seer-lab {command}`" in result.output
    assert command in [c.name for c in lab_cli.registered_commands]


def _command_paths() -> list[tuple[str, list[str]]]:
    """Every command line that has its own help: each program's root, each command, each
    sub-command (hidden ones, the moved commands' pointers, have none)."""
    paths: list[tuple[str, list[str]]] = []

    def walk(program: str, path: list[str], command: Any) -> None:
        paths.append((program, path))
        for name, sub in getattr(command, "commands", {}).items():
            if not sub.hidden:
                walk(program, [*path, name], sub)

    for program, app in CLIS.items():
        walk(program, [], typer.main.get_command(app))
    return paths


def _help(path: list[str], columns: int, program: str = "seer") -> str:
    result = CliRunner().invoke(CLIS[program], [*path, "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize(("program", "path"), _command_paths(), ids=lambda p: str(p))
def test_help_reads_well_at_80_columns(program: str, path: list[str]) -> None:
    """No type tag on flags that take no value, no ``{arg}`` in the usage line, nothing cut
    off with an ellipsis, and help text wrapped to the terminal, not at the source's line
    breaks (at 1000 columns every paragraph of the command's help, and the first of each
    command a group lists, is one line)."""
    text = _help(path, 80, program)
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    assert "<bool>" not in text and "{" not in usage and "\u2026" not in text, text
    wide = _help(path, 1000, program)
    command: Any = typer.main.get_command(CLIS[program])
    for name in path:
        command = command.commands[name]
    paragraphs = inspect.cleandoc(command.help or "").split("\n\n")
    for sub in getattr(command, "commands", {}).values():  # a group lists its commands' first
        if not sub.hidden:
            paragraphs.append(inspect.cleandoc(sub.help or "").split("\n\n")[0])
    for paragraph in paragraphs:
        words = " ".join(paragraph.replace("`", "").split())
        assert any(words in line for line in wide.splitlines()), (words, wide)


def test_replay_usage_and_the_methods_default_in_full() -> None:
    from lab.bench.draft_acceptance import DEFAULT_METHODS

    text = _help(["replay"], 80, "seer-lab")
    assert "Usage: seer-lab replay [OPTIONS] FILE" in text
    flat = " ".join(text.replace("\u2502", " ").split())  # the panel's borders out
    assert f"[default: {', '.join(DEFAULT_METHODS)}]" in flat, flat
    assert "Usage: seer db upgrade [OPTIONS] [REVISION]" in _help(["db", "upgrade"], 80)


def test_console_script_installed() -> None:
    exe = shutil.which("seer") or str(Path(sys.executable).parent / "seer")
    out = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "prepare-model" in out.stdout
    lab = shutil.which("seer-lab") or str(Path(sys.executable).parent / "seer-lab")
    out = subprocess.run([lab, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "sim-vs-real" in out.stdout


def test_prepare_model_unknown_name_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["prepare-model", "--models", "nope", "--cache-dir", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "unknown model 'nope'" in result.output


def test_prepare_model_verifies_existing_cache(tiny_model: Path) -> None:
    result = CliRunner().invoke(cli, ["prepare-model", "--models", "tiny-llama"])
    assert result.exit_code == 0, result.output
    assert str(tiny_model) in result.output


def test_demo_reports_unreachable_service() -> None:
    result = CliRunner().invoke(cli, ["demo", "--url", "http://127.0.0.1:9"])
    assert result.exit_code == 1
    assert "cannot reach" in result.output


def test_serve_config_loads_with_overrides(tmp_path: Path) -> None:
    from app.commands.serve import load_app_config

    cfg = load_app_config(
        Path("serve_config.yaml"), {"engine.model": "tiny-llama", "num_replicas": 3, "policy": None}
    )
    assert cfg.num_replicas == 3 and cfg.engine.model == "tiny-llama"
    assert cfg.engine.backend == "vllm" and cfg.policy == "context"  # the CPU default
    assert cfg.replica_num_cpus <= 0.5  # 2-core machines deadlock with 1 CPU per deployment
    bad = tmp_path / "bad.yaml"
    bad.write_text("applications:\n  - args:\n      num_replicas: 0\n")
    with pytest.raises(ValueError, match="num_replicas"):
        load_app_config(bad, {})
    bad.write_text("applications:\n  - args:\n      policy: fastest\n")
    with pytest.raises(ValueError, match="unknown policy 'fastest'; valid names: context, seer, "):
        load_app_config(bad, {})
    result = CliRunner().invoke(cli, ["serve", "--config", str(tmp_path / "missing.yaml")])
    assert result.exit_code == 2 and "cannot read" in result.output


def test_seer_serve_starts_answers_and_drains_on_sigterm(tmp_path: Path) -> None:
    """What ./run.sh runs: `seer serve` in the background, healthy, a demo; then SIGTERM with a
    job running: it gets shutdown_grace_s, is cancelled, and the process exits 0."""
    import signal
    import time

    import httpx
    import yaml

    from tests.conftest import free_port

    port = free_port()
    doc = yaml.safe_load(Path("serve_config.yaml").read_text())
    args = doc["applications"][0]["args"]
    args["shutdown_grace_s"] = 1
    args["engine"]["fake_step_s"] = 0.05
    db = tmp_path / "seer.db"  # the history store, recorded by the scheduler deployment
    args["store"] = {"enabled": True, "database_url": f"sqlite:///{db}"}
    config = tmp_path / "serve.yaml"
    config.write_text(yaml.safe_dump(doc))
    exe = shutil.which("seer") or str(Path(sys.executable).parent / "seer")
    log = (tmp_path / "serve.log").open("w")
    import os

    # as ./run.sh starts it: Ray's auth mode not chosen by the caller (the suite's is)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    proc = subprocess.Popen(
        [exe, "serve", "--config", str(config), "--backend", "fake", "--policy", "divided",
         "--num-replicas", "2", "--port", str(port), "--num-cpus", "2"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            try:
                if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "seer serve not healthy in 180 s"
            time.sleep(1)
        result = CliRunner().invoke(
            cli, ["demo", "--url", url, "--json", "--policy", "divided", "--max-tokens", "4"]
        )
        assert result.exit_code == 0, result.output
        _assert_ray_refuses_strangers((tmp_path / "serve.log").read_text())
        store = httpx.get(f"{url}/healthz", timeout=5).json()["store"]
        assert store["accepted"] > 0 and store["dropped"] == 0, store
        job = httpx.post(
            f"{url}/v1/rollouts",
            json={
                "prompts": [f"p{i}" for i in range(4)],
                "group_size": 4,
                "max_tokens": 400,  # ~100 tokens each at 50 ms: seconds past the grace
                "sampling": {"seed": 3},
            },
        )
        assert job.status_code == 202
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=120)
    text = (tmp_path / "serve.log").read_text()
    assert rc == 0, text[-3000:]
    assert "draining jobs (grace 1 s)" in text and "drained (1 job(s) cancelled)" in text, text[
        -3000:
    ]
    from app.store.reader import StoreReader

    reader = StoreReader(f"sqlite:///{db}")
    try:
        counts = reader.counts()
        assert counts["jobs"] >= 1 and counts["requests"] >= 1, counts
    finally:
        reader.close()


def _assert_ray_refuses_strangers(log: str) -> None:
    """The local Ray of `seer serve` listens on every interface (Ray binds no other way): with
    its token authentication a driver that lacks the token cannot join it."""
    import os
    import re

    assert not (Path.home() / ".ray" / "auth_token").exists()  # no token a stranger could read
    found = re.search(r"started a local Ray at (\S+) \(token authentication on", log)
    assert found, log[-3000:]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    stranger = subprocess.run(
        [sys.executable, "-c", f"import ray; ray.init(address={found[1]!r}); print('JOINED')"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert stranger.returncode != 0 and "JOINED" not in stranger.stdout, stranger.stdout
