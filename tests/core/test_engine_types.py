import math

import pytest
from pydantic import ValidationError

from core.engine import ChunkRequest, ChunkResult, FinishReason, SamplingParams


def _req(**kw: object) -> ChunkRequest:
    base: dict[str, object] = dict(
        request_id="r", group_id="g", prompt_token_ids=[1, 2], chunk_cap=8, max_tokens=20
    )
    base.update(kw)
    return ChunkRequest.model_validate(base)


def test_chunk_budget_is_min_of_chunk_and_remaining() -> None:
    assert _req().chunk_budget == 8
    assert _req(generated_token_ids=list(range(15))).chunk_budget == 5
    assert _req(generated_token_ids=[5, 6]).engine_request_id == "r@2"


def test_request_at_cap_is_rejected_naming_the_value() -> None:
    with pytest.raises(ValidationError, match="already at max_tokens=20"):
        _req(generated_token_ids=list(range(20)))


@pytest.mark.parametrize(
    "field,value",
    [("chunk_cap", 0), ("prompt_token_ids", []), ("request_id", ""), ("max_tokens", 0)],
)
def test_bad_request_fields(field: str, value: object) -> None:
    with pytest.raises(ValidationError, match=field):
        _req(**{field: value})


def test_sampling_rejects_unknown_field_and_bounds() -> None:
    with pytest.raises(ValidationError, match="foo"):
        SamplingParams.model_validate({"foo": 1})
    with pytest.raises(ValidationError, match="top_p"):
        SamplingParams(top_p=0.0)
    assert SamplingParams().temperature == 1.0


def test_result_consistency_checks() -> None:
    ok = ChunkResult(
        request_id="r", token_ids=[1, 2], logprobs=[-0.1, -math.inf], finish_reason="stop"
    )
    assert ok.finished and ok.finish_reason is FinishReason.STOP
    assert not ChunkResult(request_id="r", token_ids=[], finish_reason="chunk").finished
    with pytest.raises(ValidationError, match="1 logprobs for 2 tokens"):
        ChunkResult(request_id="r", token_ids=[1, 2], logprobs=[0.0], finish_reason="stop")
    with pytest.raises(ValidationError, match="non-finite"):
        ChunkResult(request_id="r", token_ids=[1], logprobs=[math.nan], finish_reason="stop")
    with pytest.raises(ValidationError, match="accepted_tokens=3 > drafted_tokens=1"):
        ChunkResult(
            request_id="r",
            token_ids=[],
            finish_reason="chunk",
            drafted_tokens=1,
            accepted_tokens=3,
        )


def test_budget_within_context_limit() -> None:
    assert _req().budget_within(100) == 8
    assert _req(generated_token_ids=[1, 2, 3]).budget_within(9) == 4
    with pytest.raises(ValueError, match="no room under max_model_len=5"):
        _req(generated_token_ids=[1, 2, 3]).budget_within(5)


def test_budget_end_is_length_at_either_limit() -> None:
    req = _req(generated_token_ids=[1, 2, 3])  # prompt 2, generated 3, max_tokens 20
    assert req.budget_end(8, 100) is FinishReason.CHUNK
    assert req.budget_end(17, 100) is FinishReason.LENGTH  # request's own max_tokens
    assert req.budget_end(5, 10) is FinishReason.LENGTH  # context limit: 2 + 3 + 5
