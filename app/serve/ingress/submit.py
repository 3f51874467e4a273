"""Submitting a job: validate its prompts against the model, tokenize, submit to the scheduler,
wait; the common path of every dialect's rollout routes.

Invariants: a prompt that cannot fit the model context is a 422 naming it before it is
tokenized (a text of n bytes is at least n / max_token_bytes tokens); tokenizing and decoding run
in a thread, never on the event loop; a caller that goes away cancels its job once the job
exists, and never cancels one its submission did not create (nor one under an Idempotency-Key:
its retry waits for it).
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from app.api import GroupResult, RolloutRequest
from app.rollout import IdempotentCall, expand, with_text
from app.serve.ingress.base import IngressBase
from app.serve.ingress.errors import unprocessable
from app.serve.scheduler.deployment import JobOutcome, Submitted
from app.serve.scheduler.jobs import JobError

log = logging.getLogger("seer.ingress")


class Submission(IngressBase):
    """Job submission and waiting, for the route classes."""

    async def _prompt_ids(self, req: RolloutRequest) -> list[list[int]]:
        max_len = self.config.engine.max_model_len
        vocab = self.codec.vocab_size
        if req.max_tokens >= max_len:
            raise unprocessable(
                ["max_tokens"],
                f"max_tokens={req.max_tokens} must be below the model context of {max_len} tokens",
            )
        if req.prompt_ids is not None and len(req.prompt_ids) != len(req.prompts):
            raise unprocessable(
                ["prompt_ids"],
                f"{len(req.prompt_ids)} prompt_ids for {len(req.prompts)} prompts",
            )
        for i, p in enumerate(req.prompts):
            if len(p) == 0:
                raise unprocessable(["prompts", i], "prompt is empty")
            if isinstance(p, list):
                bad = [t for t in p if not 0 <= t < vocab]
                if bad:
                    raise unprocessable(
                        ["prompts", i], f"token ids {bad[:5]} outside the vocabulary [0, {vocab})"
                    )
        texts = [(i, p) for i, p in enumerate(req.prompts) if isinstance(p, str)]
        per_token = self.codec.max_token_bytes
        for i, p in texts:  # an oversized text is refused before it is tokenized (seconds)
            n_bytes = len(p.encode())
            at_least = -(-n_bytes // per_token)
            if at_least + req.max_tokens > max_len:
                raise unprocessable(
                    ["prompts", i],
                    f"prompt of {n_bytes} bytes is at least {at_least} tokens (a token is at "
                    f"most {per_token} bytes) + max_tokens={req.max_tokens}: exceeds the model "
                    f"context of {max_len} tokens",
                )

        def encode() -> list[list[int]]:
            return [self.codec.encode(p, req.chat_template) for _, p in texts]

        encoded = await asyncio.to_thread(encode) if texts else []
        ids: list[list[int]] = [p if isinstance(p, list) else [] for p in req.prompts]
        for (i, _), e in zip(texts, encoded, strict=True):
            ids[i] = e
        for i, p in enumerate(ids):
            if len(p) + req.max_tokens > max_len:
                raise unprocessable(
                    ["prompts", i],
                    f"prompt of {len(p)} tokens + max_tokens={req.max_tokens} "
                    f"exceeds the model context of {max_len} tokens",
                )
        return ids

    async def _decode(self, groups: list[GroupResult]) -> list[GroupResult]:
        def run() -> list[GroupResult]:
            return [with_text(g, self.codec.decode) for g in groups]

        return await asyncio.to_thread(run)

    async def _submit(
        self,
        req: RolloutRequest,
        job_id: str | None = None,
        cancel_digest: str | None = None,
        rid: str | None = None,
        idempotent: IdempotentCall | None = None,
    ) -> Submitted:
        """Validate against the model, tokenize, submit; returns the job (for a repeat of an
        ``idempotent`` call, the one it made). ``cancel_digest``: of the token its submitter may
        cancel it with (None: the operator only); ``rid``: the ``/generate`` call's own id, by
        which ``/abort_request`` may end it."""
        if req.expected_policy is not None:  # only then is the running policy worth a round trip
            running: str = await self._ask(self.scheduler.policy())
            if req.expected_policy != running:
                raise unprocessable(
                    ["policy"],
                    f"the service runs policy {running!r}, not {req.expected_policy!r} (the "
                    "policy is the scheduler deployment's user_config; see README)",
                )
        mode = self.config.engine.logprobs_mode
        if req.logprobs_mode is not None and req.logprobs_mode != mode:
            raise unprocessable(
                ["logprobs_mode"],
                f"the service's engines return {mode!r} logprobs, not {req.logprobs_mode!r} "
                "(engine.logprobs_mode in the service config; fixed at engine start)",
            )
        prompts = await self._prompt_ids(req)
        plan = expand(job_id or uuid.uuid4().hex[:12], req, prompts, mode)
        plan.cancel_digest = cancel_digest
        plan.rid = rid
        plan.idempotent = idempotent
        submitted: Submitted = await self._ask(self.scheduler.submit(plan))
        return submitted

    async def _run(
        self,
        req: RolloutRequest,
        rid: str | None = None,
        partial: bool = False,
        idempotent: IdempotentCall | None = None,
    ) -> tuple[str, JobOutcome]:
        """Submit the job and wait until it is terminal. A caller that goes away, while the
        job is being submitted or after, cancels it: once its submission is through (the job
        exists) the cancel goes to the scheduler, and a cancel that is slow to answer is not
        withdrawn. A submission that failed cancels nothing (the id may be another's job). An
        ``idempotent`` call's job is not cancelled: it runs on for the caller's retry (which
        waits for it). ``rid``: a ``/generate`` call's own id, the job's id then (else a
        random one)."""
        job_id = rid or uuid.uuid4().hex[:12]
        # detached: the request's cancellation must not cancel the submission under way
        submit = self._background.keep(self._submit(req, job_id, rid=rid, idempotent=idempotent))
        try:
            job_id = (await asyncio.shield(submit)).status.id
            outcome: JobOutcome = await self._ask(self.scheduler.wait(job_id, partial))
        except asyncio.CancelledError:  # the caller went away: stop generating for nobody
            if idempotent is None:
                self._background.keep(self._cancel_submitted(submit))
            else:
                log.info("the caller of rollout %s went away: kept for its retry", job_id)
            raise
        return job_id, outcome

    async def _cancel_submitted(self, submit: asyncio.Future[Submitted]) -> None:
        bound = self.config.replica_call_timeout_s
        await asyncio.wait([submit], timeout=bound)
        if not submit.done() or submit.cancelled() or submit.exception() is not None:
            return  # not submitted (within the bound): there is no job of ours to cancel
        job_id = submit.result().status.id
        log.info("the caller of rollout %s went away: cancelling it", job_id)
        cancel = self._background.keep(self.scheduler.cancel(job_id))
        done, _ = await asyncio.wait([cancel], timeout=bound)
        if not done:
            log.warning("cancel of %s not answered within %gs (still on its way)", job_id, bound)
        elif cancel.cancelled():
            log.warning("cancel of %s was itself cancelled; the job runs on", job_id)
        elif isinstance(cancel.exception(), JobError):
            log.info("cancel of %s refused: %s", job_id, cancel.exception())
        elif cancel.exception() is not None:
            log.warning("cancel of %s failed: %r", job_id, cancel.exception())
