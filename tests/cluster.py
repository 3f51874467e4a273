"""A multi-node Ray cluster on this machine's loopback, for the cluster tests.

The cluster lives in its own process (``python -m tests.cluster``): a test process may already
run a local Ray of its own (the session's Serve app), and one process joins one Ray. That
process owns a ``ray.cluster_utils.Cluster`` whose every node advertises and listens on
127.0.0.1: ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, set before Ray is imported, makes Ray take
the loopback address as the node address instead of replacing it with the machine's routable one
(``ray._private.services.get_node_ip_address``). Worker nodes are added in-process
(``Cluster.add_node``); ``ray start --address`` refuses to start a worker node under that
setting, so the loopback cluster cannot be built from ``ray start`` processes.

The test side (``LoopbackCluster``) sends one JSON command per line and reads one JSON answer
per line, each under a hard timeout: a hang fails in seconds with the command that hung.
Commands: ``add_node`` (num_gpus, num_cpus) -> node_id; ``remove_node`` (node_id) -> the node's
processes are SIGKILLed, as when a machine dies; ``nodes`` -> alive node ids;
``where`` (app, deployments) -> each engine replica's ``ReplicaPlacement``; ``exit``.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

#: Set in every process of the cluster and of the drivers that join it (see the module doc).
LOOPBACK_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
}


class LoopbackCluster:
    """The test side: start the cluster process, send it commands (each bounded)."""

    def __init__(self, head_cpus: float, log: Path, start_timeout_s: float = 120) -> None:
        """``log``: the cluster process's stderr (Ray's own messages)."""
        self.env = {**os.environ, **LOOPBACK_ENV}
        self.log = log
        with log.open("w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.cluster", str(head_cpus)],
                cwd=Path(__file__).resolve().parent.parent,
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        hello = self._answer("start", start_timeout_s)
        self.address: str = hello["address"]
        self.head_node_id: str = hello["head_node_id"]

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self._lines.put(line)
        self._lines.put("")  # the process ended

    def _answer(self, what: str, timeout_s: float) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            raise TimeoutError(f"cluster process: no answer to {what!r} in {timeout_s} s") from None
        if not line:
            raise RuntimeError(f"cluster process exited (rc {self.proc.poll()}) during {what!r}")
        # the answer's JSON object first: Ray's log lines share this stdout, and one was seen
        # written between an answer and its newline ('{"ok": true}(raylet) Raylet is ...')
        out: dict[str, Any] = json.JSONDecoder().raw_decode(line)[0]
        if "error" in out:
            raise RuntimeError(f"cluster process: {what!r} failed: {out['error']}")
        return out

    def call(self, op: str, timeout_s: float = 60, **args: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        return self._answer(op, timeout_s)

    def add_node(self, num_gpus: float, num_cpus: float = 1) -> str:
        node_id: str = self.call("add_node", num_gpus=num_gpus, num_cpus=num_cpus)["node_id"]
        return node_id

    def remove_node(self, node_id: str) -> None:
        self.call("remove_node", node_id=node_id)

    def nodes(self) -> list[str]:
        alive: list[str] = self.call("nodes")["nodes"]
        return alive

    def where(self, app: str, deployments: list[str]) -> list[dict[str, Any]]:
        placements: list[dict[str, Any]] = self.call(
            "where", timeout_s=90, app=app, deployments=deployments
        )["placements"]
        return placements

    def close(self) -> None:
        with contextlib.suppress(TimeoutError, RuntimeError, OSError):
            self.call("exit", timeout_s=60)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def _serve(head_cpus: float) -> None:
    """The cluster process: a head (no GPU) and the worker nodes it is told to add."""
    os.environ.update(LOOPBACK_ENV)
    import ray
    from ray.cluster_utils import Cluster

    def say(**out: Any) -> None:
        print(json.dumps(out), flush=True)

    cluster = Cluster(
        initialize_head=True,
        connect=True,
        head_node_args={"num_cpus": head_cpus, "num_gpus": 0, "include_dashboard": False},
    )
    nodes: dict[str, Any] = {}
    say(address=cluster.address, head_node_id=cluster.head_node.node_id)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd.pop("op")
        try:
            if op == "add_node":
                node = cluster.add_node(num_cpus=cmd["num_cpus"], num_gpus=cmd["num_gpus"])
                nodes[node.node_id] = node
                say(node_id=node.node_id)
            elif op == "remove_node":
                cluster.remove_node(nodes.pop(cmd["node_id"]), allow_graceful=False)
                say(ok=True)
            elif op == "nodes":
                say(nodes=[n["NodeID"] for n in ray.nodes() if n["Alive"]])
            elif op == "where":
                from ray import serve

                placements = [
                    serve.get_deployment_handle(name, app_name=cmd["app"])
                    .where.remote()
                    .result(timeout_s=60)
                    .model_dump(mode="json")
                    for name in cmd["deployments"]
                ]
                say(placements=placements)
            elif op == "exit":
                say(ok=True)
                break
            else:
                say(error=f"unknown op {op!r}")
        except Exception as exc:  # noqa: BLE001 - reported to the test, which fails with it
            say(error=repr(exc))
    t0 = time.monotonic()
    ray.shutdown()
    cluster.shutdown()
    print(f"cluster down in {time.monotonic() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    _serve(float(sys.argv[1]))
