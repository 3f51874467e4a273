"""/openapi.json is the contract: schemathesis runs every check against the real app (Serve,
fake engine replicas) from the schema the app serves, and finds nothing: no 5xx, no answer
outside what is documented, no schema-valid request refused, no invalid one accepted.

Two passes with a fixed seed: with the operator token (the operator endpoints past their auth:
speculation, weights, abort_all, cancel), and without (their 401/403). The rules the schema
cannot state are left to ``schemathesis_hooks.py``. Reports go to pytest's tmp_path, never the
checkout (schemathesis writes to its working directory).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.serve.local import LocalService
from tests.app.serve.fakes import checkpoint

pytestmark = pytest.mark.serve

ROOT = Path(__file__).resolve().parents[3]
HOOKS = Path(__file__).with_name("schemathesis_hooks.py")
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
TOKEN = "t0ken"
#: examples per operation and phase: ~1,500 cases with the token (~1.5 min on 2 busy cores)
EXAMPLES = 30
SEED = 1


def fuzz_app(weights_root: Path) -> dict[str, Any]:
    """The app under test: fake engines at 1 ms a token (a fuzzed job is done in well under
    --request-timeout), a divided policy (verl's whole-group KV check cannot bind: see the
    hooks), limits small enough to keep fuzzed jobs small."""
    return {
        "num_replicas": 2,
        "replica_num_cpus": 0.25,
        "chunk_tokens": 8,
        "policy": "divided",
        "health_period_s": 0.5,
        "replica_call_timeout_s": 5,
        "limits": {
            "max_open_jobs": 8,
            "max_job_requests": 64,
            "max_job_tokens": 8192,
            "retry_after_s": 1,
            "max_body_bytes": 1_048_576,
            "body_read_timeout_s": 2,
        },
        "operator_token": TOKEN,
        "weights_root": str(weights_root),
        "engine": {"backend": "fake", "max_model_len": 512, "fake_step_s": 0.001},
    }


@pytest.fixture(scope="module")
def fuzzed(
    local_service: LocalService, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """The app deployed as ``seer`` (replacing any other module's), with an empty checkpoint
    under its weights_root that the fake engines load."""
    root = tmp_path_factory.mktemp("weights")
    checkpoint(root / "ckpt")
    args = fuzz_app(root)
    url = local_service.deploy(args)
    yield {"url": url, "args": args, "checkpoint": str(root / "ckpt")}
    local_service.delete()


def test_the_app_serves_its_deployment_schema(fuzzed: dict[str, Any]) -> None:
    """The schema fuzzed is this checkout's, with the deployment's bounds: the replicas import
    the code the driver imports, not another installed copy."""
    from app.engines.fake import VOCAB
    from app.serve.ingress.deployment import api
    from app.serve.ingress.schema import deployment_schema

    engine = fuzzed["args"]["engine"]
    want = deployment_schema(
        api.openapi(), max_model_len=engine["max_model_len"], vocab_size=VOCAB, logprobs_mode="raw"
    )
    assert httpx.get(f"{fuzzed['url']}/openapi.json").json() == want


@pytest.mark.parametrize("operator", [True, False], ids=["operator", "anonymous"])
def test_schemathesis_finds_nothing(fuzzed: dict[str, Any], tmp_path: Path, operator: bool) -> None:
    cmd = [
        str(SCHEMATHESIS), "run", f"{fuzzed['url']}/openapi.json",
        "--checks", "all", "--seed", str(SEED), "--max-examples", str(EXAMPLES),
        "--workers", "1", "--request-timeout", "30", "--generation-database", "none",
        "--no-color", "--report", "junit", "--report-dir", str(tmp_path / "reports"),
    ]  # fmt: skip
    paths = httpx.get(f"{fuzzed['url']}/openapi.json").json()["paths"]
    secured = {  # what the schema says each endpoint's security is: [{"bearer": []}(, {})]
        f"{method.upper()} {path}": op["security"]
        for path, ops in paths.items()
        for method, op in ops.items()
        if "security" in op
    }
    required = sorted(label for label, sec in secured.items() if {} not in sec)
    assert required == [  # the operator's endpoints, declared (the fuzzer's auth checks act)
        "POST /update_weights_from_disk", "POST /v1/weights", "PUT /v1/speculation",
    ]  # fmt: skip
    assert sorted(label for label, sec in secured.items() if {} in sec) == [
        "DELETE /v1/rollouts/{job_id}", "POST /abort_request",
    ]  # fmt: skip
    if operator:
        cmd += ["--header", f"Authorization: Bearer {TOKEN}"]
    else:  # the endpoints that read a token (the others are fuzzed in the operator pass)
        for label in secured:
            cmd += ["--include-name", label]
    statuses = tmp_path / "statuses.txt"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "SCHEMATHESIS_HOOKS": str(HOOKS),
        "SEER_FUZZ_APP": json.dumps(fuzzed["args"]),
        "SEER_FUZZ_CHECKPOINT": fuzzed["checkpoint"],
        "SEER_FUZZ_STATUSES": str(statuses),
    }
    t0 = time.monotonic()
    run = subprocess.run(
        cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    print(f"schemathesis: exit {run.returncode} in {time.monotonic() - t0:.0f} s")
    print(run.stdout[-3000:])
    assert run.returncode == 0, run.stdout + run.stderr
    seen: dict[str, set[int]] = {}
    for line in statuses.read_text().splitlines():
        label, code = line.rsplit(" ", 1)
        seen.setdefault(label, set()).add(int(code))
    if operator:  # the token opened every operator endpoint at least once (a fuzz that never
        # got through would pass on its exit code alone)
        for label in [*required, "POST /abort_request"]:
            assert any(200 <= c < 300 for c in seen.get(label, ())), (label, seen.get(label))
    else:  # without it none answered but 401 (no token) or a refusal of the body itself
        for label in required:
            assert 401 in seen.get(label, ()), (label, seen.get(label))
            assert not any(200 <= c < 300 for c in seen[label]), (label, seen[label])
