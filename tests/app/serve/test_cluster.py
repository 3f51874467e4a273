"""The service on a real multi-node Ray cluster (``tests.cluster``: 127.0.0.1 only), started
the way a user starts it there: ``seer serve --address`` (or ``$RAY_ADDRESS``) from a process
that joins the cluster. No mock of Ray: worker nodes with logical GPUs (``num_gpus=2`` each),
real placement groups, a worker node SIGKILLed mid-rollout. Engines are ``fake`` (vLLM cannot run
on a logical GPU): what the vLLM engine would be built with is asserted on its arguments
(``engine_kwargs``), and the placement through each replica's own report (``where``).

Every wait is bounded: the cluster process answers each command within its timeout, ``seer
serve`` must be healthy within ``_READY_S``, a rollout returns within ``_ROLLOUT_S``.
"""

from __future__ import annotations

import collections
import json
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.app.serve.fakes import checkpoint
from tests.cluster import LoopbackCluster
from tests.conftest import free_port

pytestmark = [pytest.mark.serve, pytest.mark.slow]

_READY_S = 240.0  # seer serve healthy on the cluster (Serve start + replicas; ~30-60 s here)
_ROLLOUT_S = 240.0
_GPUS_PER_NODE = 2
_WORKERS = 3
_HEAD = {"node:__internal_head__": 0.001}

#: The app of these tests: fake engine replicas asking for logical GPUs, control on the head.
_ARGS: dict[str, Any] = {
    "num_replicas": _WORKERS * _GPUS_PER_NODE,
    "replica_num_cpus": 0.1,
    "gpus_per_replica": 1,
    "control_resources": _HEAD,
    "policy": "divided",
    "chunk_tokens": 16,
    "health_period_s": 0.5,
    "replica_call_timeout_s": 2,
    "operator_token": "t0ken",
    "store": {"enabled": False},
    # ~100 tokens per response (EOS with p=1/97 per token) at 30 ms per token
    "engine": {"backend": "fake", "max_model_len": 1024, "fake_step_s": 0.03},
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackCluster]:
    log = tmp_path_factory.mktemp("cluster") / "cluster.log"
    c = LoopbackCluster(head_cpus=2, log=log)
    try:
        for _ in range(_WORKERS):
            c.add_node(num_gpus=_GPUS_PER_NODE, num_cpus=1)
        yield c
    finally:
        c.close()


class SeerServe:
    """``seer serve --config FILE --address ADDR`` in the background, healthy, then SIGTERM."""

    def __init__(
        self,
        cluster: LoopbackCluster,
        tmp: Path,
        args: dict[str, Any],
        via_env: bool = False,
        extra: tuple[str, ...] = (),
    ) -> None:
        doc = yaml.safe_load(Path("serve_config.yaml").read_text())
        doc["applications"][0]["args"] = args
        self.config = tmp / "serve.yaml"
        self.config.write_text(yaml.safe_dump(doc))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / "serve.log"
        exe = shutil.which("seer") or str(Path(sys.executable).parent / "seer")
        cmd = [exe, "serve", "--config", str(self.config), "--port", str(self.port), *extra]
        env = {k: v for k, v in cluster.env.items() if k != "SEER_DATABASE_URL"}
        if via_env:
            env["RAY_ADDRESS"] = cluster.address
        else:
            cmd += ["--address", cluster.address]
        self.cmd = cmd
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> SeerServe:
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                self.cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()  # never left running beside the next test
            raise
        return self

    def _wait_healthy(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + _READY_S
        while True:
            assert self.proc.poll() is None, self.text()[-3000:]
            ready = re.search(r"ready in [0-9.]+ s: (http://\S+)", self.text())
            if ready is None:
                assert time.monotonic() < deadline, (
                    f"not ready in {_READY_S} s: {self.text()[-3000:]}"
                )
                time.sleep(1)
                continue
            self.url = ready.group(1)  # Serve may already listen elsewhere on the cluster
            try:
                r = httpx.get(f"{self.url}/healthz", timeout=5)
                if r.status_code == 200 and r.json()["status"] == "ok":
                    return
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, (
                f"not healthy in {_READY_S} s: {self.text()[-3000:]}"
            )
            time.sleep(1)

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def health(self) -> dict[str, Any]:
        out: dict[str, Any] = httpx.get(f"{self.url}/healthz", timeout=10).json()
        return out


def _table(health: dict[str, Any], placements: list[dict[str, Any]], head: str) -> str:
    rows = [f"scheduler on {'head' if health['scheduler_node_id'] == head else 'a worker'}"]
    rows += [
        f"{r['replica_id']}: node {r['node_id'][:8]} gpus {r['gpu_ids']} "
        f"CUDA_VISIBLE_DEVICES={p['cuda_visible_devices']} bundles {p['bundles']}"
        for r, p in zip(health["replicas"], placements, strict=True)
    ]
    return "\n".join(rows)


def test_on_a_cluster_the_store_must_be_shared(cluster: LoopbackCluster, tmp_path: Path) -> None:
    """An enabled store without a URL would be a SQLite file on one node: refused before
    anything is deployed, naming the field; an explicit URL or a disabled store is accepted."""
    args = {**_ARGS, "store": {"enabled": True}}
    serve = SeerServe(cluster, tmp_path, args)
    r = subprocess.run(serve.cmd, env=serve.env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "store.database_url" in r.stderr and "postgresql" in r.stderr, r.stderr[-2000:]


def test_the_readme_s_cluster_recipe_brings_the_environment_to_the_deployments(
    cluster: LoopbackCluster, tmp_path: Path
) -> None:
    """README, "GPUs and Ray clusters": export SEER_DATABASE_URL, then seer serve --address. The
    scheduler runs on the cluster, whose environment is its raylet's: the CLI saw the URL, the
    actor did not, refused to start and the deploy failed. Now what the command resolved from
    its environment (the store's URL, the operator token) reaches the deployments."""
    db = tmp_path / "seer.db"  # one disk for every node of this machine's cluster
    args = {**_ARGS, "num_replicas": 2, "store": {"enabled": True}}
    del args["operator_token"]
    serve = SeerServe(cluster, tmp_path, args)
    serve.env["SEER_DATABASE_URL"] = f"sqlite:///{db}"
    serve.env["SEER_OPERATOR_TOKEN"] = "from-the-env"
    with serve:
        body = {"prompts": [[5, 6]], "group_size": 2, "max_tokens": 16, "wait": True}
        r = httpx.post(f"{serve.url}/v1/rollouts", json=body, timeout=120)
        assert r.status_code == 200, r.text
        auth = {"Authorization": "Bearer from-the-env"}
        put = {"settings": {"max_draft": 3}}
        r = httpx.put(f"{serve.url}/v1/speculation", json=put, headers=auth, timeout=30)
        assert r.status_code == 200, r.text  # the ingress, on the cluster, has the token
        store = serve.health()["store"]
        assert store is not None and store["accepted"] > 0, store
    from app.store.reader import StoreReader

    reader = StoreReader(f"sqlite:///{db}")
    try:
        assert [j.state for j in reader.jobs()] == ["done"]
    finally:
        reader.close()


def test_tensor_parallel_replicas_get_a_placement_group_on_one_node(
    cluster: LoopbackCluster, tmp_path: Path
) -> None:
    """TP=2 (executor mp): each replica reserves both GPUs of one node as one placement group,
    holds them itself (its engine sees CUDA_VISIBLE_DEVICES=0,1) and the replicas take one node
    each; the cluster is joined through $RAY_ADDRESS."""
    from app.config import AppConfig
    from app.engines.vllm.engine import engine_kwargs

    engine = {**_ARGS["engine"], "tensor_parallel_size": 2, "executor": "mp"}
    args = {**_ARGS, "num_replicas": _WORKERS, "gpus_per_replica": 2, "engine": engine}
    with SeerServe(cluster, tmp_path, args, via_env=True) as app:
        health = app.health()
        names = [f"engine-{i}" for i in range(_WORKERS)]
        placements = cluster.where("seer", names)
        print(_table(health, placements, cluster.head_node_id))
        assert f"joined the Ray cluster at {cluster.address}" in app.text()
        nodes = [r["node_id"] for r in health["replicas"]]
        assert len(set(nodes)) == _WORKERS and cluster.head_node_id not in nodes
        for rep, where in zip(health["replicas"], placements, strict=True):
            assert sorted(rep["gpu_ids"]) == ["0", "1"] == sorted(where["gpu_ids"])
            assert sorted(where["cuda_visible_devices"].split(",")) == ["0", "1"]
            assert where["bundles"] == [{"CPU": 0.1, "GPU": 2.0}]
            assert where["bundle_nodes"] == [rep["node_id"]] == [where["node_id"]]
        assert app.stop() == 0
    # What each replica's vLLM engine would be built with on a GPU node.
    cfg = AppConfig.model_validate(args)
    kwargs = engine_kwargs(cfg.engine, Path("/models/m"), cpu=False)
    assert kwargs["tensor_parallel_size"] == 2 and kwargs["distributed_executor_backend"] == "mp"
    assert kwargs["gpu_memory_utilization"] == cfg.engine.gpu_memory_utilization
    assert "enable_chunked_prefill" not in kwargs  # the CPU-only workaround stays off on GPU


@pytest.fixture(scope="module")
def gpu_app(
    cluster: LoopbackCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SeerServe]:
    """The app of the tests below, alive to the end of the module. Tests that start their own
    ``seer serve`` come above the first of them: it holds every logical GPU of the cluster."""
    with SeerServe(cluster, tmp_path_factory.mktemp("gpu_app"), _ARGS) as app:
        yield app
        print(app.text()[-2000:])


def test_one_gpu_replicas_land_one_per_logical_gpu_spread_over_the_nodes(
    cluster: LoopbackCluster, gpu_app: SeerServe
) -> None:
    health = gpu_app.health()
    names = [f"engine-{i}" for i in range(_ARGS["num_replicas"])]
    placements = cluster.where("seer", names)
    print(_table(health, placements, cluster.head_node_id))
    assert health["scheduler_node_id"] == cluster.head_node_id  # control_resources: the head
    per_node = collections.Counter(r["node_id"] for r in health["replicas"])
    assert cluster.head_node_id not in per_node  # the head has no GPU
    assert sorted(per_node.values()) == [_GPUS_PER_NODE] * _WORKERS
    slots = {(r["node_id"], tuple(r["gpu_ids"])) for r in health["replicas"]}
    assert len(slots) == len(names)  # one replica per logical GPU
    for rep, where in zip(health["replicas"], placements, strict=True):
        assert len(rep["gpu_ids"]) == 1 and where["gpu_ids"] == rep["gpu_ids"]
        assert where["cuda_visible_devices"] == rep["gpu_ids"][0]  # what its engine sees
        assert where["bundles"] == [{"CPU": 0.1, "GPU": 1.0}]
        assert where["bundle_nodes"] == [rep["node_id"]]


def _rollout(url: str, out: list[httpx.Response]) -> None:
    body = {
        "prompts": [f"prompt {i}" for i in range(12)],
        "group_size": 4,
        "max_tokens": 300,
        "sampling": {"seed": 11},
        "wait": True,
    }
    out.append(httpx.post(f"{url}/v1/rollouts", json=body, timeout=_ROLLOUT_S))


def _responses(r: httpx.Response) -> dict[tuple[int, int], list[int]]:
    assert r.status_code == 200, r.text[-2000:]
    groups = r.json()["groups"]
    assert [g["prompt_index"] for g in groups] == list(range(12))
    out = {}
    for g in groups:
        assert [x["index"] for x in g["responses"]] == [0, 1, 2, 3]  # every group whole, once
        for x in g["responses"]:
            assert x["length"] == len(x["token_ids"]) == len(x["logprobs"])
            out[(g["prompt_index"], x["index"])] = x["token_ids"]
    return out


def _states(app: SeerServe) -> dict[str, str]:
    return {r["replica_id"]: r["state"] for r in app.health()["replicas"]}


def test_a_worker_node_lost_mid_rollout_loses_nothing_and_its_replicas_come_back(
    cluster: LoopbackCluster, gpu_app: SeerServe, tmp_path: Path
) -> None:
    """New weights and speculation settings first; then a rollout, and mid-rollout a worker
    node is SIGKILLed with its two replicas. The rollout completes with every response exactly
    once and token for token what the same seeded rollout gave with every node up (the fake
    engine's tokens are a function of seed, context and weights: a lost or doubled chunk would
    show). When a node with GPUs joins again, Serve re-places the lost replicas there and they
    rejoin on the current weights and speculation settings."""
    url = gpu_app.url
    auth = {"Authorization": "Bearer t0ken"}
    weights = checkpoint(tmp_path / "ckpt-v1")
    r = httpx.post(f"{url}/v1/weights", json={"path": str(weights)}, headers=auth, timeout=120)
    assert r.status_code == 200, r.text
    version = r.json()["version"]
    r = httpx.put(
        f"{url}/v1/speculation", json={"settings": {"max_draft": 3}}, headers=auth, timeout=30
    )
    assert r.status_code == 200, r.text
    spec_version = r.json()["version"]

    baseline: list[httpx.Response] = []
    _rollout(url, baseline)
    expected = _responses(baseline[0])

    health = gpu_app.health()
    victim = health["replicas"][0]["node_id"]
    lost = sorted(r["replica_id"] for r in health["replicas"] if r["node_id"] == victim)
    assert len(lost) == _GPUS_PER_NODE
    result: list[httpx.Response] = []
    rollout = threading.Thread(target=_rollout, args=(url, result))
    rollout.start()
    deadline = time.monotonic() + 60
    while sum(r["load"]["chunks_in_flight"] for r in gpu_app.health()["replicas"]) < 24:
        assert time.monotonic() < deadline and rollout.is_alive(), "rollout did not start"
        time.sleep(0.1)
    t_kill = time.monotonic()
    cluster.remove_node(victim)
    timeline = {"kill": 0.0}
    # until the rollout is over and the lost replicas were seen out of rotation, whichever
    # comes last (a fast rollout may end before a probe marks them down)
    while rollout.is_alive() or "degraded" not in timeline:
        states = _states(gpu_app)
        if "degraded" not in timeline and all(states[rid] != "healthy" for rid in lost):
            timeline["degraded"] = time.monotonic() - t_kill
        if not rollout.is_alive():
            timeline.setdefault("rollout done", time.monotonic() - t_kill)
        assert time.monotonic() - t_kill < _ROLLOUT_S, (
            json.dumps(gpu_app.health(), indent=1)[-4000:] + gpu_app.text()[-6000:]
        )
        time.sleep(0.2)
    rollout.join()
    got = _responses(result[0])
    assert got == expected  # nothing lost, nothing twice, the same samples
    assert result[0].json()["stats"]["requests"] == 48
    assert "degraded" in timeline, "the lost replicas never left rotation"
    health = gpu_app.health()
    assert health["status"] == "degraded"
    alive = {r["replica_id"] for r in health["replicas"] if r["state"] == "healthy"}
    assert alive.isdisjoint(lost) and len(alive) == len(health["replicas"]) - len(lost)

    new_node = cluster.add_node(num_gpus=_GPUS_PER_NODE, num_cpus=1)
    t_join = time.monotonic()
    while True:
        health = gpu_app.health()
        back = {r["replica_id"]: r for r in health["replicas"] if r["replica_id"] in lost}
        if all(r["state"] == "healthy" for r in back.values()):
            break
        assert time.monotonic() - t_join < _READY_S, back
        time.sleep(0.5)
    timeline["replicas back"] = time.monotonic() - t_kill
    print("node-kill timeline (s after the kill):", json.dumps(timeline))
    for rep in back.values():
        assert rep["node_id"] == new_node and len(rep["gpu_ids"]) == 1
        assert rep["load"]["policy_version"] == version
    spec = httpx.get(f"{url}/v1/speculation", timeout=10).json()
    assert spec["version"] == spec_version and spec["settings"]["max_draft"] == 3
    runs = {r["replica_id"]: r["version"] for r in spec["replicas"]}
    assert all(runs[rid] == spec_version for rid in lost), spec["replicas"]
    assert health["status"] == "ok"
