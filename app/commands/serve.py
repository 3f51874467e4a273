"""``seer serve``: run the Serve app from serve_config.yaml, with validated overrides."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Annotated, Any

import typer

RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1"}


def load_app_config(path: Path, overrides: dict[str, Any]) -> Any:
    """AppConfig from the first application's ``args`` in a Serve config file, plus overrides
    (``engine.`` keys go to the engine section). Raises ValueError naming the bad field."""
    import yaml
    from pydantic import ValidationError

    from app.config import AppConfig

    try:
        doc = yaml.safe_load(path.read_text()) or {}
        args = dict(doc["applications"][0].get("args") or {})
    except (OSError, yaml.YAMLError, KeyError, IndexError, TypeError) as exc:
        raise ValueError(f"cannot read applications[0].args from {path}: {exc}") from None
    engine = dict(args.get("engine") or {})
    for key, value in overrides.items():
        if value is None:
            continue
        if key.startswith("engine."):
            engine[key.removeprefix("engine.")] = value
        else:
            args[key] = value
    args["engine"] = engine
    try:
        return AppConfig.model_validate(args)
    except ValidationError as exc:
        raise ValueError(f"invalid config {path}: {exc}") from None


def serve_cmd(
    config: Annotated[Path, typer.Option(help="Serve config file")] = Path("serve_config.yaml"),
    model: Annotated[str | None, typer.Option(help="override engine.model")] = None,
    backend: Annotated[str | None, typer.Option(help="override engine.backend")] = None,
    num_replicas: Annotated[int | None, typer.Option(help="override num_replicas")] = None,
    host: Annotated[str, typer.Option(help="HTTP host")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP port")] = 8000,
    num_cpus: Annotated[int | None, typer.Option(help="CPUs for the local Ray")] = None,
) -> None:
    """Start a local Ray, run the Seer app and block until Ctrl-C or SIGTERM."""
    try:
        cfg = load_app_config(
            config,
            {"engine.model": model, "engine.backend": backend, "num_replicas": num_replicas},
        )
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    for k, v in RAY_ENV.items():
        os.environ.setdefault(k, v)
    import ray
    from ray import serve

    from app.serve.builder import build_app

    def _stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False)
    signal.signal(signal.SIGTERM, _stop)  # after ray.init, which installs its own handler
    try:
        serve.start(http_options={"host": host, "port": port})
        t0 = time.perf_counter()
        typer.echo(
            f"starting {cfg.num_replicas} {cfg.engine.backend} replica(s) of "
            f"{cfg.engine.model} ...",
            err=True,
        )
        serve.run(build_app(cfg), blocking=False)
        typer.echo(f"ready in {time.perf_counter() - t0:.1f} s: http://{host}:{port}", err=True)
        signal.pause()  # until SIGINT/SIGTERM
    except KeyboardInterrupt:
        typer.echo("stopping ...", err=True)
    finally:
        serve.shutdown()
        ray.shutdown()


def register(cli: typer.Typer) -> None:
    cli.command("serve")(serve_cmd)
