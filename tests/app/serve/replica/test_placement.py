"""Where the deployments ask to run (``app.serve.replica.placement``) and the GPU/cluster settings
that decide it: validated with errors naming the field, turned into the Serve options of each
deployment. The placement itself on a real multi-node cluster: tests/app/serve/test_cluster.py."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from app.commands.serve import capacity_problem
from app.config import ServiceConfig
from app.env import DATABASE_URL_ENV
from app.serve.replica.placement import control_options, engine_bundles, engine_options
from app.store.config import StoreConfig, check_shared


def _cfg(**kw: Any) -> ServiceConfig:
    engine = {"backend": "fake", "max_model_len": 512, **kw.pop("engine", {})}
    return ServiceConfig.model_validate({"replica_num_cpus": 0.5, "engine": engine, **kw})


def test_a_cpu_replica_asks_for_cpus_only() -> None:
    cfg = _cfg()
    assert not cfg.on_gpu and engine_bundles(cfg) is None
    assert engine_options(cfg, "engine-0") == {
        "name": "engine-0",
        "ray_actor_options": {"num_cpus": 0.5},
    }


@pytest.mark.parametrize("gpus", [1.0, 0.5])
def test_a_one_gpu_replica_holds_its_gpu_in_one_bundle(gpus: float) -> None:
    cfg = _cfg(gpus_per_replica=gpus, engine={"gpu_memory_utilization": 0.85 * gpus})
    assert cfg.on_gpu
    opts = engine_options(cfg, "engine-3")
    assert opts["ray_actor_options"] == {"num_cpus": 0.5, "num_gpus": gpus}
    assert opts["placement_group_bundles"] == [{"CPU": 0.5, "GPU": gpus}]
    assert opts["placement_group_strategy"] == "STRICT_PACK"


def test_tensor_parallel_mp_is_one_bundle_with_every_gpu_held_by_the_replica() -> None:
    cfg = _cfg(gpus_per_replica=4, engine={"tensor_parallel_size": 4, "executor": "mp"})
    opts = engine_options(cfg, "engine-0")
    assert opts["placement_group_bundles"] == [{"CPU": 0.5, "GPU": 4.0}]
    assert opts["ray_actor_options"]["num_gpus"] == 4.0  # CUDA_VISIBLE_DEVICES lists all four


def test_tensor_parallel_ray_is_ray_serve_llm_s_layout() -> None:
    """One GPU bundle per vLLM Ray worker, the replica's CPU merged into the first: the bundles
    Ray Serve LLM builds for the same engine (its own merge function, run here)."""
    from ray.llm._internal.serve.core.server.llm_server import (
        _merge_replica_actor_and_child_actor_bundles as merge,
    )

    cfg = _cfg(
        gpus_per_replica=2,
        placement_strategy="PACK",
        engine={"tensor_parallel_size": 2, "executor": "ray"},
    )
    opts = engine_options(cfg, "engine-1")
    workers = [{"GPU": 1.0}, {"GPU": 1.0}]
    assert opts["placement_group_bundles"] == merge(workers, {"CPU": 0.5})
    assert opts["placement_group_bundles"] == [{"GPU": 1.0, "CPU": 0.5}, {"GPU": 1.0}]
    assert opts["ray_actor_options"] == {"num_cpus": 0.5, "num_gpus": 0}  # workers take GPUs
    assert opts["placement_group_strategy"] == "PACK"


@pytest.mark.parametrize(
    ("kw", "names"),
    [
        ({"gpus_per_replica": 2}, ["gpus_per_replica=2", "tensor_parallel_size=1"]),
        (
            {"gpus_per_replica": 1, "engine": {"tensor_parallel_size": 2}},
            ["gpus_per_replica=1", "engine.tensor_parallel_size=2"],
        ),
        ({"gpus_per_replica": -1}, ["gpus_per_replica"]),
        ({"engine": {"tensor_parallel_size": 0}}, ["tensor_parallel_size"]),
        ({"engine": {"executor": "nccl"}}, ["executor"]),
        ({"placement_strategy": "SPREAD"}, ["placement_strategy"]),
        ({"control_resources": {"head": 0}}, ["control_resources['head']=0"]),
        ({"control_resources": {"": 1}}, ["control_resources['']"]),
        # two replicas on one GPU, each asking vLLM for 85% of it: the second never starts
        ({"gpus_per_replica": 0.5}, ["gpu_memory_utilization=0.85", "gpus_per_replica=0.5"]),
    ],
)
def test_gpu_and_placement_settings_are_validated_naming_the_field(
    kw: dict[str, Any], names: list[str]
) -> None:
    with pytest.raises(ValidationError) as err:
        _cfg(**kw)
    for name in names:
        assert name in str(err.value), str(err.value)


def test_control_deployments_carry_control_resources_besides_their_quarter_cpu() -> None:
    assert control_options(_cfg()) == {}
    opts = control_options(_cfg(control_resources={"node:__internal_head__": 0.001}))
    assert opts == {
        "ray_actor_options": {"num_cpus": 0.25, "resources": {"node:__internal_head__": 0.001}}
    }


def test_capacity_short_of_gpus_is_an_error_locally_and_a_warning_on_a_cluster() -> None:
    cfg = _cfg(num_replicas=4, gpus_per_replica=1)
    assert capacity_problem(cfg, {"GPU": 4.0, "CPU": 8.0}, joined=False) is None
    with pytest.raises(ValueError, match=r"num_replicas=4 x gpus_per_replica=1 need 4 GPUs"):
        capacity_problem(cfg, {"CPU": 8.0}, joined=False)
    warning = capacity_problem(cfg, {"GPU": 2.0}, joined=True)
    assert warning is not None and "has 2" in warning and "waits" in warning
    assert capacity_problem(_cfg(num_replicas=4), {"CPU": 2.0}, joined=False) is None


def test_on_a_cluster_an_enabled_store_needs_a_shared_database(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(DATABASE_URL_ENV, raising=False)
    with pytest.raises(ValueError, match=r"store\.database_url.*postgresql"):
        check_shared(StoreConfig(enabled=True))
    check_shared(StoreConfig(enabled=False))
    check_shared(StoreConfig(enabled=True, database_url="sqlite:////shared/seer.db"))
    check_shared(StoreConfig(enabled=True, database_url="postgresql+psycopg://u@db:5432/seer"))
    monkeypatch.setenv(DATABASE_URL_ENV, "postgresql+psycopg://u@db:5432/seer")
    check_shared(StoreConfig(enabled=True))


def test_the_gpu_serve_config_places_one_engine_per_gpu_with_control_on_the_head() -> None:
    from pathlib import Path

    from app.commands.serve import load_app_config

    cfg = load_app_config(Path("serve_config.gpu.yaml"), {})
    assert cfg.on_gpu and cfg.num_replicas == 8 and cfg.policy == "seer"
    assert cfg.engine.speculation.method == "grouped" and cfg.engine.dtype == "bfloat16"
    opts = engine_options(cfg, "engine-0")
    assert opts["placement_group_bundles"] == [{"CPU": 1.0, "GPU": 1.0}]
    assert control_options(cfg)["ray_actor_options"]["resources"] == {
        "node:__internal_head__": 0.001
    }
    one = load_app_config(Path("serve_config.gpu.yaml"), {"num_replicas": 1})
    assert one.num_replicas == 1  # what run.sh passes on a machine with one GPU
