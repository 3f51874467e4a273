"""OpenAI and SGLang request/response shapes, converted without Ray (``app.api.openai``,
``app.api.sglang``, ``app.api.dialect``)."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from app.api import (
    AbortRequest,
    CompletionRequest,
    GenerateAnswer,
    GenerateRequest,
    GroupResult,
    Response,
)
from app.api.dialect import cut_at_stop, cut_at_stop_token
from app.api.openai import completion_response
from app.api.sglang import generate_response


def _decode(ids: list[int]) -> str:
    return "".join(chr(t) for t in ids)


def _ids(text: str) -> list[int]:
    return [ord(c) for c in text]


def test_stop_string_cut_keeps_the_shortest_token_prefix() -> None:
    ids = _ids("abc||def||g")
    cut = cut_at_stop(ids, [0.1] * len(ids), _decode(ids), ["||", "zz"], _decode)
    assert (cut.text, cut.matched) == ("abc", "||")
    assert cut.token_ids == _ids("abc||") and cut.logprobs == [0.1] * 5
    kept = cut_at_stop(ids, None, _decode(ids), ["de", "c|"], _decode, keep_stop=True)
    assert kept.text == "abc|" and kept.token_ids == _ids("abc|") and kept.logprobs is None
    none = cut_at_stop(ids, None, _decode(ids), ["x", ""], _decode)
    assert none.matched is None and none.token_ids == ids and none.text == "abc||def||g"

    def pairs(toks: list[int]) -> str:  # two characters per token: the stop spans tokens
        return "".join(chr(t) * 2 for t in toks)

    two = [ord(c) for c in "abcd"]
    cut2 = cut_at_stop(two, None, pairs(two), ["bc"], pairs)
    assert cut2.token_ids == two[:3] and cut2.text == "aab"
    assert cut_at_stop_token([5, 6, 7, 6], [1.0, 2.0, 3.0, 4.0], [7, 9]) == (
        [5, 6, 7],
        [1.0, 2.0, 3.0],
        7,
    )


def _group(i: int, finishes: list[str], version: int = 3) -> GroupResult:
    return GroupResult(
        group_id=f"g{i}",
        prompt_index=i,
        prompt_id=None,
        prompt_token_ids=[1, 2],
        responses=[
            Response(
                index=j,
                token_ids=_ids("ab;cd"),
                text="",
                logprobs=[-0.5] * 5,
                finish_reason=f,
                length=5,
                chunks=1,
                replicas=["r0"],
                finished_after_s=0.1,
                policy_version=version,
            )
            for j, f in enumerate(finishes)
        ],
    )


def test_openai_request_becomes_one_group_per_prompt() -> None:
    req = CompletionRequest.model_validate(
        {"model": "m", "prompt": [[1, 2], [3]], "n": 4, "max_tokens": 9, "top_k": -1, "seed": 2}
    )
    native = req.to_rollout()
    assert native.prompts == [[1, 2], [3]] and native.group_size == 4 and native.max_tokens == 9
    assert native.sampling.top_k == 0 and native.sampling.seed == 2 and not native.chat_template
    assert not native.logprobs and native.wait
    one = CompletionRequest.model_validate({"model": "m", "prompt": [7, 8], "group_key": "k"})
    assert one.to_rollout().prompts == [[7, 8]] and one.to_rollout().group_key == "k"
    assert CompletionRequest.model_validate({"model": "m", "prompt": "hi"}).prompts() == ["hi"]
    with pytest.raises(ValueError, match="group_key needs exactly one prompt"):
        CompletionRequest.model_validate(
            {"model": "m", "prompt": ["a", "b"], "group_key": "k"}
        ).to_rollout()
    for bad in ({"stream": True}, {"temperature": float("nan")}, {"best_of": 2}, {"n": "2"}):
        with pytest.raises(ValidationError):
            CompletionRequest.model_validate({"model": "m", "prompt": "x", **bad})


def test_openai_response_numbers_choices_and_cuts_stops() -> None:
    req = CompletionRequest.model_validate(
        {"model": "m", "prompt": ["a", "b"], "n": 2, "logprobs": 0, "stop": ";"}
    )
    out = completion_response(
        req, [_group(0, ["stop", "length"]), _group(1, ["length"] * 2)], "j1", "model-x", 5, _decode
    )
    assert out.id == "cmpl-j1" and out.model == "model-x" and out.policy_version == 3
    assert [c.index for c in out.choices] == [0, 1, 2, 3]
    c = out.choices[1]
    assert c.text == "ab" and c.finish_reason == "stop" and c.stop_reason == ";"
    assert c.token_ids == _ids("ab;") and c.logprobs is not None
    assert c.logprobs.tokens == ["a", "b", ";"] and c.logprobs.text_offset == [0, 1, 2]
    assert out.usage.prompt_tokens == 4 and out.usage.completion_tokens == 12


def test_sglang_request_and_response_shapes() -> None:
    req = GenerateRequest.model_validate(
        {
            "input_ids": [1, 2],
            "sampling_params": {"max_new_tokens": 5, "top_k": -1, "stop_token_ids": [ord("c")]},
            "return_logprob": True,
            "rid": "r-1",
        }
    )
    native = req.to_rollout()
    assert native.prompts == [[1, 2]] and native.group_size == 1 and native.max_tokens == 5
    single = generate_response(req, [_group(0, ["length"])], "r-1", _decode)
    assert isinstance(single, dict)
    meta = single["meta_info"]
    assert single["text"] == "ab;c" and single["output_ids"] == _ids("ab;c")
    assert meta["finish_reason"] == {"type": "stop", "matched": ord("c")}
    assert meta["output_token_logprobs"] == [[-0.5, t, None] for t in _ids("ab;c")]
    assert meta["id"] == "r-1" and meta["policy_version"] == 3 and meta["completion_tokens"] == 4
    batch = GenerateRequest.model_validate({"input_ids": [[1], [2]], "sampling_params": {"n": 2}})
    many = generate_response(
        batch, [_group(0, ["abort", "length"]), _group(1, ["stop", "stop"])], "j", _decode
    )
    assert isinstance(many, list) and len(many) == 4
    kinds = [m["meta_info"]["finish_reason"]["type"] for m in many]
    assert kinds == ["abort", "length", "stop", "stop"]
    assert [m["meta_info"]["id"] for m in many] == ["j-0-0", "j-0-1", "j-1-0", "j-1-1"]
    answer: TypeAdapter[GenerateAnswer] = TypeAdapter(GenerateAnswer)  # the client reads it so
    for wire in (single, many):
        parsed = answer.validate_python(wire)
        assert answer.dump_python(parsed, mode="json", exclude_unset=True) == wire
    assert "output_token_logprobs" not in many[0]["meta_info"]  # no return_logprob: absent
    with pytest.raises(ValidationError, match="exactly one of input_ids and text"):
        GenerateRequest.model_validate({"sampling_params": {}})
    with pytest.raises(ValidationError, match="rid"):
        GenerateRequest.model_validate({"text": "x", "rid": "has space"})
    with pytest.raises(ValidationError):
        GenerateRequest.model_validate({"text": "x", "sampling_params": {"min_p": 0.1}})
    with pytest.raises(ValidationError, match="give a rid"):
        AbortRequest.model_validate({})
    assert AbortRequest.model_validate({"abort_all": True}).abort_all
