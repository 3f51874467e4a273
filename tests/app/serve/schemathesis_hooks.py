"""Schemathesis hooks for the fake-engine app of ``test_schemathesis.py`` (``SCHEMATHESIS_HOOKS``).

Invariant: they only touch a positive (schema-valid) case whose body breaks one of the rules
below, each a rule the published schema cannot state (a sum or product across fields, a count
that must equal another's, the service's state at run time), so that its 422 is not read as "a
schema-valid request rejected": such a case is skipped, but for a weight update, where every
generated path breaks the rule, its path is set to a checkpoint the service can load, and an
Idempotency-Key is made fresh for every call (one schema-valid value for another: the case
stays positive). A negative case is never touched (the
service refuses it either way). One failure is dropped, for the reason its hook says
(DELETE /v1/rollouts/{id} cancels, it does not delete). The app's config comes in
``SEER_FUZZ_APP`` (JSON: the ``args`` it was deployed with), the checkpoint in
``SEER_FUZZ_CHECKPOINT``. Every answer's status is appended to ``SEER_FUZZ_STATUSES`` (one
"METHOD PATH STATUS" line per call: what the test asserts each endpoint answered).

What the config makes unable to bind, so no hook is needed: the KV checks of
``Dispatcher._check_fits`` (the fake engine's KV is max_model_len x max_num_seqs, so a response
that fits the context fits a replica; the policy is divided, so verl's whole-group check does
not apply); the 429s of the open totals (schemathesis accepts a 429 for a valid request).
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import schemathesis
from schemathesis import Case, GenerationMode, HookContext

from app.config import ServiceLimits
from app.engines.fake import FakeCodec

APP: dict[str, Any] = json.loads(os.environ.get("SEER_FUZZ_APP", "{}"))
MAX_LEN: int = APP.get("engine", {}).get("max_model_len", 0)
LIMITS = ServiceLimits(**APP.get("limits", {}))
CODEC = FakeCodec()  # the fake engine's tokenizer: one token per character


def _prompts(method_path: str, body: dict[str, Any]) -> tuple[list[Any], bool, int, int] | None:
    """(prompts, chat template, group size, max tokens) of a job request, as the service reads
    them (``RolloutRequest``, ``CompletionRequest.prompts``, ``GenerateRequest.prompts``)."""
    if method_path == "POST /v1/rollouts":
        return (
            list(body["prompts"]),
            body.get("chat_template", True),
            body["group_size"],
            body["max_tokens"],
        )
    if method_path == "POST /v1/completions":
        p = body["prompt"]
        one = isinstance(p, str) or not any(isinstance(t, str | list) for t in p)
        return ([p] if one else list(p)), False, body.get("n", 1), body.get("max_tokens", 16)
    if method_path == "POST /generate":
        sp = body.get("sampling_params") or {}
        if body.get("text") is not None:
            t = body["text"]
            prompts = [t] if isinstance(t, str) else list(t)
        else:
            ids = body["input_ids"]
            prompts = list(ids) if all(isinstance(x, list) for x in ids) else [ids]
        return prompts, False, sp.get("n", 1), sp.get("max_new_tokens", 128)
    return None


def broken_rule(method_path: str, body: Any) -> str | None:
    """The first rule below that ``body`` (a schema-valid body of ``method_path``) breaks, or
    None."""
    if not isinstance(body, dict):
        return None
    job = _prompts(method_path, body)
    if job is not None:
        prompts, chat, group_size, max_tokens = job
        tokens = [len(CODEC.encode(p, chat)) if isinstance(p, str) else len(p) for p in prompts]
        # prompt tokens + max_tokens <= the model context: a sum across fields, and a text
        # prompt's tokens are the tokenizer's. Ingress._prompt_ids; test_service.py's
        # test_a_prompt_too_long_for_the_context_is_refused_before_tokenizing (the schema
        # states each term: test_deployment_schema.py)
        if any(n + max_tokens > MAX_LEN for n in tokens):
            return "prompt + max_tokens over the model context"
        # prompt_ids: as many as prompts; two arrays' lengths. Ingress._prompt_ids;
        # test_service.py's test_loose_or_non_finite_input_is_422_naming_the_field
        ids = body.get("prompt_ids")
        if ids is not None and len(ids) != len(prompts):
            return "prompt_ids not one per prompt"
        # group_key and prompt_id name one prompt's group: exactly one prompt. A condition on
        # another field's count, which for OpenAI's prompt and SGLang's text / input_ids depends
        # on which of their shapes is sent (if/then over anyOf branches: not stated).
        # RolloutRequest._one_prompt_per_key, native_rollout; test_compat.py's
        # test_openai_request_becomes_one_group_per_prompt, test_trainer_api.py's
        # test_completions_cut_at_a_stop_string_across_chunks
        keyed = body.get("group_key") is not None or body.get("prompt_id") is not None
        if keyed and len(prompts) != 1:
            return "group_key or prompt_id with more than one prompt"
        # a job's size: prompts x group_size requests <= limits.max_job_requests, x max_tokens
        # <= limits.max_job_tokens (422 per job); products across fields. JobBook.check;
        # test_job_book.py's test_per_job_limits_are_422_and_a_held_id_409
        requests = len(prompts) * group_size
        if requests > LIMITS.max_job_requests or requests * max_tokens > LIMITS.max_job_tokens:
            return "job over max_job_requests or max_job_tokens"
    # policy: the one the scheduler runs now (its user_config, switched live without
    # restarting the ingress: run-time state). Ingress._submit; test_service.py's
    # test_policy_change_reconfigures_without_restarting
    if method_path == "POST /v1/rollouts" and body.get("policy") not in (None, APP.get("policy")):
        return "policy other than the one running"
    return None


#: weight updates: their path must be a directory under weights_root holding a checkpoint, and
#: sha256 (if given) its digest (the filesystem at run time). Ingress._update_weights,
#: WeightUpdater; test_trainer_api.py's test_weight_update_changes_samples_and_versions
WEIGHTS_PATH = {"POST /v1/weights": "path", "POST /update_weights_from_disk": "model_path"}


def loadable(method_path: str, body: Any) -> Any:
    """``body`` of a weight update with the path of a checkpoint the service can load and no
    digest to check (any other body as it is)."""
    field = WEIGHTS_PATH.get(method_path)
    if field is None or not isinstance(body, dict):
        return body
    out = {**body, field: os.environ["SEER_FUZZ_CHECKPOINT"]}
    if out.get("sha256") is not None:
        out["sha256"] = None
    return out


def _label(case: Case) -> str:
    return f"{case.operation.method.upper()} {case.operation.path}"


def _positive(case: Case) -> bool:
    meta = case.meta
    return meta is None or meta.generation.mode is not GenerationMode.NEGATIVE


@schemathesis.hook
def filter_failure(context: HookContext, failure: Any, case: Case, response: Any) -> bool:
    """Keep every failure but ST301 "deleted resource still available" after DELETE
    /v1/rollouts/{id}: that DELETE cancels the job, whose record stays readable (state
    cancelled, or done if it had finished) until limits.job_ttl_s, as its route documents;
    trainers read how far a cancelled job got. Ingress.cancel; test_service.py's
    test_cancel_aborts_the_job_s_chunks_at_once."""
    free = getattr(failure, "free", "")
    return not (failure.code == "ST301" and free.startswith("DELETE /v1/rollouts/"))


@schemathesis.hook
def filter_case(context: HookContext, case: Case) -> bool:
    return not _positive(case) or broken_rule(_label(case), case.body) is None


#: an Idempotency-Key names one call: sent again with another body it is a 422 (the service's
#: memory of earlier calls: run-time state). app.serve.ingress.idempotency; test_retries.py's
#: test_a_202_repeated_under_its_key_is_the_same_job_another_body_a_422
IDEMPOTENCY_KEY = "Idempotency-Key"


@schemathesis.hook
def map_case(context: HookContext, case: Case) -> Case:
    if _positive(case):
        case.body = loadable(_label(case), case.body)
        if case.headers and IDEMPOTENCY_KEY in case.headers:  # a fresh key for every call
            case.headers = {**case.headers, IDEMPOTENCY_KEY: uuid.uuid4().hex}
    return case


@schemathesis.hook
def after_call(context: HookContext, case: Case, response: Any) -> None:
    out = os.environ.get("SEER_FUZZ_STATUSES")
    if out:
        with open(out, "a") as fh:
            fh.write(f"{_label(case)} {response.status_code}\n")
