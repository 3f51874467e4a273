"""A 422 about the native job a trainer call became names the call's own fields: ``own_loc`` of
the OpenAI and SGLang request models (over HTTP: tests/app/serve/test_trainer_api.py)."""

from __future__ import annotations

import pytest

from app.api import CompletionRequest, GenerateRequest


@pytest.mark.parametrize(
    ("prompt", "native", "own"),
    [
        ("text", ["prompts", 0], ["prompt"]),
        ([5, 6], ["prompts", 0, 1], ["prompt", 1]),  # one prompt of ids: the id's index
        (["a", "b"], ["prompts", 1], ["prompt", 1]),
        ([[5], [6]], ["prompts", 1, 0], ["prompt", 1, 0]),
        ("text", ["group_size"], ["n"]),
        ("text", ["max_tokens"], ["max_tokens"]),
        ("text", ["sampling", "seed"], ["seed"]),
        ("text", ["prompt_ids", 0], ["prompt_id", 0]),
        ("text", [], []),  # a rule across fields stays at the body
    ],
)
def test_openai_fields(prompt: object, native: list[str | int], own: list[str | int]) -> None:
    req = CompletionRequest.model_validate({"model": "m", "prompt": prompt})
    assert req.own_loc(native) == own


@pytest.mark.parametrize(
    ("body", "native", "own"),
    [
        ({"input_ids": [5, 6]}, ["prompts", 0, 1], ["input_ids", 1]),
        ({"input_ids": [[5], [6]]}, ["prompts", 1], ["input_ids", 1]),
        ({"text": "hi"}, ["prompts", 0], ["text"]),
        ({"text": ["a", "b"]}, ["prompts", 1], ["text", 1]),
        ({"text": "hi"}, ["max_tokens"], ["sampling_params", "max_new_tokens"]),
        ({"text": "hi"}, ["group_size"], ["sampling_params", "n"]),
        ({"text": "hi"}, ["sampling", "seed"], ["sampling_params", "sampling_seed"]),
        ({"text": "hi"}, ["logprobs"], ["return_logprob"]),
    ],
)
def test_sglang_fields(
    body: dict[str, object], native: list[str | int], own: list[str | int]
) -> None:
    assert GenerateRequest.model_validate(body).own_loc(native) == own
