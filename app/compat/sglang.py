"""``POST /generate`` and ``/abort_request`` in the shape SGLang serves and slime sends.

One call is one job (its id: the call's ``rid`` when given, for ``/abort_request``); each
prompt (``input_ids`` or ``text``) is one group of ``sampling_params.n`` samples and the answer
lists them prompt-major (a single dict for one prompt and n = 1). Samples of one group sent one
per call join with ``group_key``. ``meta_info.output_token_logprobs`` is
``[[logprob, token_id, null], ...]`` when ``return_logprob``; ``meta_info.finish_reason.type``
is ``stop``, ``length`` or ``abort`` (the call was aborted: the tokens generated so far are
returned); ``meta_info.policy_version`` is the weights version that sampled the tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.api import (
    GenerateAbort,
    GenerateLength,
    GenerateMeta,
    GenerateOutput,
    GenerateRequest,
    GenerateStop,
    GroupResult,
)
from app.compat.stop import cut_at_stop, cut_at_stop_token


def generate_outputs(
    req: GenerateRequest,
    groups: list[GroupResult],
    rid: str,
    decode: Callable[[list[int]], str],
) -> list[GenerateOutput]:
    """Every sample of a terminal job (groups in prompt order), prompt-major; blocking
    (detokenizes)."""
    p = req.sampling_params
    out: list[GenerateOutput] = []
    for g in groups:
        for r in g.responses:
            ids, lps, stop_id = cut_at_stop_token(r.token_ids, r.logprobs, p.stop_token_ids or [])
            cut = cut_at_stop(ids, lps, decode(ids), p.stops(), decode, p.no_stop_trim)
            n = len(cut.token_ids)
            finish: GenerateStop | GenerateLength | GenerateAbort
            if cut.matched is not None:
                finish = GenerateStop(type="stop", matched=cut.matched)
            elif stop_id is not None:
                finish = GenerateStop(type="stop", matched=stop_id)
            elif r.finish_reason == "length":
                finish = GenerateLength(type="length", length=n)
            elif r.finish_reason == "abort":
                finish = GenerateAbort(type="abort", message="aborted (POST /abort_request)")
            else:
                finish = GenerateStop(type="stop", matched=cut.token_ids[-1] if n else None)
            meta = GenerateMeta(
                id=rid if len(groups) * p.n == 1 else f"{rid}-{g.prompt_index}-{r.index}",
                finish_reason=finish,
                prompt_tokens=len(g.prompt_token_ids),
                completion_tokens=n,
                policy_version=r.policy_version,
                logprobs_mode=r.logprobs_mode,
            )
            if req.return_logprob:  # set only then: absent from the answer without
                lps = cut.logprobs or []
                meta.output_token_logprobs = [
                    (lp, t, None) for lp, t in zip(lps, cut.token_ids, strict=True)
                ]
            out.append(GenerateOutput(text=cut.text, output_ids=cut.token_ids, meta_info=meta))
    return out


def generate_response(
    req: GenerateRequest,
    groups: list[GroupResult],
    rid: str,
    decode: Callable[[list[int]], str],
) -> dict[str, Any] | list[dict[str, Any]]:
    """SGLang's answer (``app.api.GenerateAnswer``) as JSON data: a list of samples, or the
    only one when the request is not batched; blocking (detokenizes)."""
    out = [
        o.model_dump(mode="json", exclude_unset=True)
        for o in generate_outputs(req, groups, rid, decode)
    ]
    return out if req.batched else out[0]
