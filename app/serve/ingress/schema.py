"""The OpenAPI schema a deployment serves: the app's static schema (``api.openapi()``) with the
bounds of the deployment's model written where the static schema marks them
(``app.api.base.DEPLOYMENT_BOUND``).

Invariant: every bound written here is one the ingress enforces for the same deployment, with a
422 naming the field (``Submission._prompt_ids``: token ids in [0, vocab_size), max_tokens below
max_model_len, so a prompt of ids has at most max_model_len - 1; ``Submission._submit``: the
engines' logprobs mode); the static schema is not changed (its copy is).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from app.api.base import DEPLOYMENT_BOUND, LOGPROBS_MODE, NEW_TOKENS, TOKEN_IDS


def deployment_schema(
    schema: dict[str, Any], *, max_model_len: int, vocab_size: int, logprobs_mode: str
) -> dict[str, Any]:
    """``schema`` with this deployment's bounds: a model of ``max_model_len`` tokens of context
    and ``vocab_size`` token ids, whose engines return ``logprobs_mode`` logprobs. ValueError
    for a marker it does not know (a bound the served schema would not state)."""
    out = copy.deepcopy(schema)
    most_new = max_model_len - 1  # max_tokens < max_model_len: a prompt needs a token
    for node in _marked(out):
        kind = node[DEPLOYMENT_BOUND]
        if kind == TOKEN_IDS:
            node["items"] = {**node.get("items", {}), "minimum": 0, "maximum": vocab_size - 1}
            node["maxItems"] = min(node.get("maxItems", most_new), most_new)
        elif kind == NEW_TOKENS:
            node["maximum"] = min(node.get("maximum", most_new), most_new)
        elif kind == LOGPROBS_MODE:
            for branch in node.get("anyOf", [node]):
                if "enum" in branch:
                    branch["enum"] = [logprobs_mode]
        else:
            raise ValueError(f"{DEPLOYMENT_BOUND}: {kind!r} is not a bound this schema states")
    return out


def _marked(node: Any) -> Iterator[dict[str, Any]]:
    """Every object under ``node`` (itself included) that carries ``DEPLOYMENT_BOUND``."""
    if isinstance(node, dict):
        if DEPLOYMENT_BOUND in node:
            yield node
        for value in node.values():
            yield from _marked(value)
    elif isinstance(node, list):
        for value in node:
            yield from _marked(value)
