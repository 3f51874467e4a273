"""The native job that a compatibility request (OpenAI, SGLang) stands for."""

from __future__ import annotations

from app.api import RolloutRequest
from core.engine import SamplingParams


def native_rollout(
    prompts: list[str | list[int]],
    *,
    group_size: int,
    max_tokens: int,
    sampling: SamplingParams,
    logprobs: bool,
    group_key: str | None,
    prompt_id: str | None,
) -> RolloutRequest:
    """One group per prompt, answered when done; prompts are used as they are (no chat
    template). ValueError naming the field when ``group_key`` or ``prompt_id`` is given with
    more than one prompt (``RolloutRequest`` checks ``group_key``)."""
    if prompt_id is not None and len(prompts) != 1:
        raise ValueError(f"prompt_id needs exactly one prompt; got {len(prompts)}")
    return RolloutRequest(
        prompts=prompts,
        prompt_ids=[prompt_id] if prompt_id is not None else None,
        group_size=group_size,
        max_tokens=max_tokens,
        sampling=sampling,
        logprobs=logprobs,
        chat_template=False,
        group_key=group_key,
        wait=True,
    )
