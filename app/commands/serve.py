"""``seer serve``: run the Serve app of a Serve config file, with validated overrides.

The file means what it says: its ``http_options``, ``proxy_location`` and the first
application's ``name``, ``route_prefix``, ``runtime_env`` and ``args`` are used (CLI flags
override host, port and a few args). SIGTERM/SIGINT drain the scheduler (running jobs get
``shutdown_grace_s``, the rest are cancelled and their engine requests aborted) and exit 0.
"""

from __future__ import annotations

import math
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer


@dataclass(frozen=True)
class ServeFile:
    """What ``seer serve`` takes from a Serve config file."""

    config: Any  # AppConfig
    app_name: str
    route_prefix: str
    host: str
    port: int
    proxy_location: str
    runtime_env: dict[str, Any]


def load_serve_file(path: Path, overrides: dict[str, Any]) -> ServeFile:
    """Parse a Serve config file; ``overrides`` go into the first application's ``args``
    (``engine.`` keys into its engine section). Raises ValueError naming the bad field."""
    import yaml
    from pydantic import ValidationError

    from app.config import AppConfig

    try:
        doc = yaml.safe_load(path.read_text()) or {}
        app_doc = dict(doc["applications"][0])
        args = dict(app_doc.get("args") or {})
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
        config = AppConfig.model_validate(args)
    except ValidationError as exc:
        raise ValueError(f"invalid config {path}: {exc}") from None
    http = doc.get("http_options") or {}
    return ServeFile(
        config=config,
        app_name=str(app_doc.get("name", "seer")),
        route_prefix=str(app_doc.get("route_prefix", "/")),
        host=str(http.get("host", "127.0.0.1")),
        port=int(http.get("port", 8000)),
        proxy_location=str(doc.get("proxy_location", "HeadOnly")),
        runtime_env=dict(app_doc.get("runtime_env") or {}),
    )


def load_app_config(path: Path, overrides: dict[str, Any]) -> Any:
    """The validated ``AppConfig`` of a Serve config file plus overrides."""
    return load_serve_file(path, overrides).config


def serve_cmd(
    config: Annotated[Path, typer.Option(help="Serve config file")] = Path("serve_config.yaml"),
    model: Annotated[str | None, typer.Option(help="override engine.model")] = None,
    backend: Annotated[str | None, typer.Option(help="override engine.backend")] = None,
    num_replicas: Annotated[int | None, typer.Option(help="override num_replicas")] = None,
    policy: Annotated[str | None, typer.Option(help="override policy")] = None,
    host: Annotated[str | None, typer.Option(help="HTTP host (default: the file's)")] = None,
    port: Annotated[int | None, typer.Option(help="HTTP port (default: the file's)")] = None,
    num_cpus: Annotated[int | None, typer.Option(help="CPUs for the local Ray")] = None,
) -> None:
    """Start a local Ray, run the Seer app and block until Ctrl-C or SIGTERM."""
    try:
        sf = load_serve_file(
            config,
            {
                "engine.model": model,
                "engine.backend": backend,
                "num_replicas": num_replicas,
                "policy": policy,
            },
        )
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    cfg = sf.config
    host = host or sf.host
    port = port or sf.port
    import ray
    from ray import serve

    from app.serve.builder import build_app

    def _stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    if num_cpus is None:
        # Ray CPUs are logical: every deployment must fit, or Serve waits forever to place it.
        need = math.ceil(cfg.num_replicas * cfg.replica_num_cpus + 0.5)  # + ingress, scheduler
        have = os.cpu_count() or 1
        if need > have:
            typer.echo(
                f"note: {cfg.num_replicas} replicas x {cfg.replica_num_cpus:g} CPU + 0.5 need "
                f"{need} Ray CPUs; this machine has {have}: starting Ray with {need} logical "
                "CPUs (fine for sim/fake replicas; lower replica_num_cpus for real engines)",
                err=True,
            )
            num_cpus = need
    ray.init(
        address="local",
        num_cpus=num_cpus,
        include_dashboard=False,
        runtime_env=sf.runtime_env or None,
    )
    signal.signal(signal.SIGTERM, _stop)  # after ray.init, which installs its own handler
    try:
        serve.start(http_options={"host": host, "port": port}, proxy_location=sf.proxy_location)
        t0 = time.perf_counter()
        typer.echo(
            f"starting {cfg.num_replicas} {cfg.engine.backend} replica(s) of "
            f"{cfg.engine.model}, policy {cfg.policy} ...",
            err=True,
        )
        serve.run(build_app(cfg), name=sf.app_name, route_prefix=sf.route_prefix, blocking=False)
        typer.echo(f"ready in {time.perf_counter() - t0:.1f} s: http://{host}:{port}", err=True)
        signal.pause()  # until SIGINT/SIGTERM
    except KeyboardInterrupt:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one stop is enough
        grace = cfg.shutdown_grace_s
        typer.echo(f"stopping: draining jobs (grace {grace:g} s) ...", err=True)
        try:
            handle = serve.get_deployment_handle("SeerScheduler", app_name=sf.app_name)
            cancelled = handle.drain.remote(grace).result(
                timeout_s=grace + cfg.replica_call_timeout_s + 10
            )
            typer.echo(f"drained ({cancelled} job(s) cancelled)", err=True)
        except Exception as exc:  # noqa: BLE001 - stop anyway
            typer.echo(f"drain failed: {exc!r}; stopping anyway", err=True)
    finally:
        serve.shutdown()
        ray.shutdown()


def register(cli: typer.Typer) -> None:
    cli.command("serve")(serve_cmd)
