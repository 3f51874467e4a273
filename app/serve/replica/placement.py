"""Where the deployments run on a Ray cluster: the Serve options of each.

Placement rule (docs/cluster.md):
- An engine replica with GPUs (``gpus_per_replica > 0``) reserves them as one placement group,
  Serve's ``placement_group_bundles`` + ``placement_group_strategy``; the replica actor sits in
  bundle 0 (Serve pins it there):
  - ``engine.executor`` mp, or ``tensor_parallel_size`` 1: one bundle ``{CPU, GPU: N}``. The
    replica holds every GPU of its engine (``CUDA_VISIBLE_DEVICES`` lists them) and vLLM runs
    its tensor-parallel workers as the replica's own processes, on one node by construction.
  - ``engine.executor`` ray: one ``{GPU: 1}`` bundle per tensor-parallel worker, the replica's
    CPU merged into the first, as Ray Serve LLM places a vLLM engine
    (``ray.llm._internal.serve.core.server.llm_server._merge_replica_actor_and_child_actor_
    bundles``, not imported: it loads vLLM and torch, ~10 s); vLLM's Ray workers take the GPU
    bundles. ``placement_strategy`` STRICT_PACK keeps them on one node, PACK lets a group span
    nodes where no node has room.
- A CPU replica (the default) asks for ``replica_num_cpus`` only, as before.
- Each engine replica is its own deployment, placed independently: Serve schedules a replica
  with Ray's SPREAD strategy and a replica's placement group where Ray has room, which spreads
  replicas over the nodes (tests/app/serve/test_cluster.py measures it).
- The control deployments (ingress, scheduler, draft server) ask for ``control_resources``
  besides their quarter CPU: ``{"node:__internal_head__": 0.001}`` keeps them on the head, a
  custom resource on the CPU node started with it.
"""

from __future__ import annotations

from typing import Any

from app.config import ServiceConfig
from app.serve.options import SINGLETON


def engine_bundles(config: ServiceConfig) -> list[dict[str, float]] | None:
    """The placement group of one engine replica (None: a CPU replica needs none)."""
    gpus = config.gpus_per_replica
    if gpus <= 0:
        return None
    cpus = config.replica_num_cpus
    tp = config.engine.tensor_parallel_size
    if config.engine.executor == "ray" and tp > 1:
        workers: list[dict[str, float]] = [{"GPU": 1.0} for _ in range(tp)]
        return [{**workers[0], "CPU": cpus}, *workers[1:]]
    return [{"CPU": cpus, "GPU": gpus}]


def engine_options(config: ServiceConfig, name: str) -> dict[str, Any]:
    """``Deployment.options`` of the engine replica deployment ``name``."""
    bundles = engine_bundles(config)
    actor: dict[str, Any] = {"num_cpus": config.replica_num_cpus}
    if bundles is None:
        return {"name": name, "ray_actor_options": actor}
    # The replica takes what bundle 0 holds for it: its CPU, and its GPUs unless vLLM's Ray
    # workers take them (executor ray).
    actor["num_gpus"] = bundles[0]["GPU"] if len(bundles) == 1 else 0
    return {
        "name": name,
        "ray_actor_options": actor,
        "placement_group_bundles": bundles,
        "placement_group_strategy": config.placement_strategy,
    }


def control_options(config: ServiceConfig) -> dict[str, Any]:
    """``Deployment.options`` of a control deployment: its quarter CPU plus
    ``control_resources`` ({} when there are none: the decorator's options stand)."""
    if not config.control_resources:
        return {}
    actor = {**SINGLETON["ray_actor_options"], "resources": dict(config.control_resources)}
    return {"ray_actor_options": actor}
