"""``seer serve``: run the Serve app of a Serve config file, with validated overrides, on a
local Ray or (``--address`` / ``$RAY_ADDRESS``) on a running Ray cluster.

The file means what it says: its ``http_options``, ``proxy_location`` and the first
application's ``name``, ``route_prefix``, ``runtime_env`` and ``args`` are used (CLI flags
override host, port and a few args). SIGTERM/SIGINT drain the scheduler (running jobs get
``shutdown_grace_s``, the rest are cancelled and their engine requests aborted) and exit 0.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
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
    gpus_per_replica: Annotated[
        float | None, typer.Option(help="override gpus_per_replica (0 = CPU engines)")
    ] = None,
    policy: Annotated[str | None, typer.Option(help="override policy")] = None,
    host: Annotated[str | None, typer.Option(help="HTTP host (default: the file's)")] = None,
    port: Annotated[int | None, typer.Option(help="HTTP port (default: the file's)")] = None,
    address: Annotated[
        str | None,
        typer.Option(
            help="join the running Ray cluster at this address (HOST:PORT, or auto) instead of "
            "starting a local Ray; default: $RAY_ADDRESS"
        ),
    ] = None,
    num_cpus: Annotated[int | None, typer.Option(help="CPUs for the local Ray")] = None,
) -> None:
    """Run the Seer app (on a local Ray, or on the cluster at --address) and block until Ctrl-C
    or SIGTERM."""
    try:
        sf = load_serve_file(
            config,
            {
                "engine.model": model,
                "engine.backend": backend,
                "num_replicas": num_replicas,
                "gpus_per_replica": gpus_per_replica,
                "policy": policy,
            },
        )
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    # what this shell's environment sets travels in the config: deployments on other nodes read
    # their raylet's environment, not this one's
    cfg = sf.config.with_environment()
    host = host or sf.host
    port = port or sf.port
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is not None:
        from app.store.config import check_shared

        try:
            check_shared(cfg.store)
        except ValueError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
    auth = _local_ray_auth() if address is None else ""  # before Ray reads its config
    import ray
    from ray import serve

    from app.serve.builder import build_app

    def _stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    if address is not None:
        if num_cpus is not None:
            typer.echo("error: --num-cpus sizes a local Ray, not a joined cluster", err=True)
            raise typer.Exit(2)
        ray.init(address=address, runtime_env=sf.runtime_env or None)
        typer.echo(f"joined the Ray cluster at {address}: {_describe_nodes()}", err=True)
    else:
        if num_cpus is None:
            # Ray CPUs are logical: every deployment must fit, or Serve waits forever to place it.
            need = math.ceil(cfg.num_replicas * cfg.replica_num_cpus + 0.5)  # + control
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
        gcs = ray.get_runtime_context().gcs_address
        typer.echo(f"started a local Ray at {gcs} ({auth})", err=True)
    try:
        problem = capacity_problem(cfg, ray.cluster_resources(), joined=address is not None)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        ray.shutdown()
        raise typer.Exit(2) from None
    if problem:
        typer.echo(f"warning: {problem}", err=True)
    signal.signal(signal.SIGTERM, _stop)  # after ray.init, which installs its own handler
    try:
        serve.start(http_options={"host": host, "port": port}, proxy_location=sf.proxy_location)
        if address is not None:
            host, port = _served_at(host, port)
        t0 = time.perf_counter()
        gpus = f" x {cfg.gpus_per_replica:g} GPU" if cfg.on_gpu else ""
        typer.echo(
            f"starting {cfg.num_replicas}{gpus} {cfg.engine.backend} replica(s) of "
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
        if address is None:
            serve.shutdown()
        else:  # the cluster and its Serve instance are not ours: take only our app down
            with contextlib.suppress(Exception):
                serve.delete(sf.app_name)
        ray.shutdown()


def capacity_problem(cfg: Any, resources: dict[str, float], joined: bool) -> str | None:
    """What keeps the app's engine replicas from being placed on a Ray cluster with these total
    ``resources`` (None: nothing). A local Ray cannot grow: there it is a ValueError naming the
    fields; a joined cluster may (autoscaling, nodes still joining): there it is a warning."""
    need = cfg.num_replicas * cfg.gpus_per_replica
    have = float(resources.get("GPU", 0.0))
    if need <= have:
        return None
    text = (
        f"num_replicas={cfg.num_replicas} x gpus_per_replica={cfg.gpus_per_replica:g} need "
        f"{need:g} GPUs; the Ray cluster has {have:g}"
    )
    if not joined:
        raise ValueError(f"{text} (lower --num-replicas, or --gpus-per-replica 0 for CPU)")
    return f"{text}: Serve waits until nodes with them join"


def _served_at(host: str, port: int) -> tuple[str, int]:
    """Where Serve's HTTP proxies listen: on a joined cluster whose Serve already runs (an
    earlier ``seer serve``, ``serve deploy``), its own options stand and ``host``/``port`` are
    ignored; say so."""
    from ray.serve.context import _get_global_client  # the only way to Serve's HTTP options

    client = _get_global_client()
    if client is None:
        return host, port
    http = client.http_config
    if (http.host, http.port) != (host, port):
        typer.echo(
            f"note: Serve already runs on this cluster with HTTP on {http.host}:{http.port}; the "
            f"app is served there, not on {host}:{port} (restart Serve to move it)",
            err=True,
        )
    return str(http.host), int(http.port)


def _local_ray_auth() -> str:
    """Token authentication for the local Ray this command starts. Ray's GCS and raylets
    listen on every interface (Ray cannot bind them to loopback only), and with auth off anyone
    who reaches their ports runs code on this machine. With ``RAY_AUTH_MODE`` not set by the
    caller (``app.env`` defaults it to disabled for every other command), a fresh
    random token is put in this process's environment, which Ray's own processes inherit and
    nothing else sees; a ``RAY_AUTH_MODE`` set by the caller is kept (``disabled`` to opt out).
    Call before Ray is imported (Ray reads the mode once)."""
    from app.env import DEFAULTED

    if os.environ.get("RAY_AUTH_MODE") and "RAY_AUTH_MODE" not in DEFAULTED:
        return f"RAY_AUTH_MODE={os.environ['RAY_AUTH_MODE']} as given"
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_urlsafe(32)
    return "token authentication on: a fresh token, known to this process and its Ray only"


def _describe_nodes() -> str:
    import ray

    alive = [n for n in ray.nodes() if n["Alive"]]
    gpus = sum(n["Resources"].get("GPU", 0.0) for n in alive)
    return f"{len(alive)} node(s), {gpus:g} GPU(s)"


def register(cli: typer.Typer) -> None:
    cli.command("serve")(serve_cmd)
