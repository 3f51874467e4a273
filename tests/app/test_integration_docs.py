"""Every request shape docs/integration.md shows is sent verbatim to the service (fake engine
replicas, the app config of tests/app/serve/test_service.py) and answers 200 with the documented
fields: the integration guide cannot drift from what the service accepts."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.serve.local import LocalService
from tests.app.serve.fakes import FAKE_APP as APP

pytestmark = pytest.mark.serve
DOC = Path(__file__).resolve().parents[2] / "docs" / "integration.md"
BLOCK = re.compile(r"<!-- request: (POST \S+) \(([^)]+)\) -->\s*```json\n(.*?)```", re.S)
SHAPES = [(m[1].split()[1], m[2], json.loads(m[3])) for m in BLOCK.finditer(DOC.read_text())]


def test_the_guide_shows_every_trainer_style() -> None:
    styles = {style for _, style, _ in SHAPES}
    assert {"veRL batch", "OpenAI", "slime", "AReaL", "slime, end of step"} <= styles


@pytest.fixture(scope="module")
def url(local_service: LocalService) -> Iterator[str]:
    yield local_service.deploy(APP)
    local_service.delete()


def _samples(path: str, out: Any) -> list[dict[str, Any]]:
    """The per-sample records of an answer, in the endpoint's own shape."""
    if path == "/v1/rollouts":
        return [r for g in out["groups"] for r in g["responses"]]
    if path == "/v1/completions":
        return list(out["choices"])
    if path == "/generate":
        return out if isinstance(out, list) else [out]
    return []


@pytest.mark.parametrize(("path", "style", "body"), SHAPES, ids=[s for _, s, _ in SHAPES])
def test_documented_request_is_served(url: str, path: str, style: str, body: Any) -> None:
    # abort_all is an operator change: the guide says to send the operator token
    auth = {"Authorization": f"Bearer {APP['operator_token']}"} if body.get("abort_all") else {}
    r = httpx.post(f"{url}{path}", json=body, headers=auth, timeout=120)
    assert r.status_code == 200, r.text
    out = r.json()
    if path == "/abort_request":
        assert "aborted" in out
        return
    samples = _samples(path, out)
    n = body.get("group_size") or body.get("n") or body.get("sampling_params", {}).get("n", 1)
    prompts = body.get("prompts") or [body.get("prompt") or body.get("input_ids")]
    assert len(samples) == n * len(prompts)
    for s in samples:
        tags = s["meta_info"] if path == "/generate" else s
        assert isinstance(tags["policy_version"], int)
        assert tags["logprobs_mode"] == "raw"  # the service's (engine.logprobs_mode default)
        if path == "/generate":
            meta = s["meta_info"]
            assert meta["finish_reason"]["type"] in ("stop", "length")
            assert [t for _, t, _ in meta["output_token_logprobs"]] == s["output_ids"]
        elif path == "/v1/completions":
            assert s["logprobs"]["tokens"] == [f"token_id:{t}" for t in s["token_ids"]]
        else:
            assert len(s["logprobs"]) == len(s["token_ids"]) == s["length"]
