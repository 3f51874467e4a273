"""HTTP ingress: validate, tokenize with its own tokenizer, submit to the scheduler, stream.

Thin by design: jobs, scheduling and engines live in the ``SeerScheduler`` deployment. Bad input
is answered with 422 naming the field (never a 500: the validation handler is JSON-safe even for
NaN inputs); the scheduler's refusals keep their status (404, 409, 422, 429 + Retry-After, 503).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from fastapi import FastAPI, Header, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ValidationError
from ray import serve
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from swagger_ui_bundle import swagger_ui_path

from app.api import (
    AbortRequest,
    CompletionRequest,
    CompletionResponse,
    DiskWeightsRequest,
    DiskWeightsResponse,
    ErrorBody,
    GenerateRequest,
    GroupResult,
    JobAccepted,
    JobState,
    JobStatus,
    ModelCard,
    ModelList,
    RolloutRequest,
    RolloutResponse,
    ServiceHealth,
    SpeculationState,
    SpeculationUpdate,
    WeightsState,
    WeightsUpdate,
    WeightsUpdateRequest,
)
from app.compat.openai import completion_response
from app.compat.sglang import generate_response
from app.config import ServiceConfig, ServiceLimits
from app.engines.base import TextCodec
from app.engines.registry import make_codec
from app.rollout import expand, rollout_stats, with_text
from app.serve import logs
from app.serve.detached import Background
from app.serve.ingress.auth import (
    authorize,
    bearer,
    configured_token,
    is_operator,
    new_cancel_token,
    settings_patch,
    token_digest,
)
from app.serve.ingress.body_limits import BodyLimits
from app.serve.ingress.scheduler_handle import SchedulerHandle
from app.serve.ingress.schema import deployment_schema
from app.serve.ingress.strict_json import StrictJSONRoute
from app.serve.scheduler.deployment import JobOutcome
from app.serve.scheduler.jobs import JobError
from app.serve.scheduler.metrics import CONTENT_TYPE

log = logging.getLogger("seer.ingress")
T = TypeVar("T")

api = FastAPI(
    title="Seer rollout service",
    version="0.2.0",
    description="Grouped rollouts for synchronous LLM RL (Seer). Jobs: POST /v1/rollouts.",
    docs_url=None,  # served below from local assets: the default loads them from a CDN
    openapi_url=None,  # served by the Ingress: the deployment's schema (see Ingress.openapi)
)
api.router.route_class = StrictJSONRoute  # before any route: a key twice in a body is a 422
api.mount("/static/swagger", StaticFiles(directory=str(swagger_ui_path)), name="swagger")
_DEFAULT_LIMITS = ServiceLimits()
api.state.body_limits = (_DEFAULT_LIMITS.max_body_bytes, _DEFAULT_LIMITS.body_read_timeout_s)
api.add_middleware(BodyLimits, limits=lambda: api.state.body_limits)  # set by Ingress


@api.get("/docs", include_in_schema=False)
async def _docs(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "").rstrip("/")
    return get_swagger_ui_html(
        openapi_url=f"{root}/openapi.json",
        title="Seer rollout service - API",
        swagger_js_url=f"{root}/static/swagger/swagger-ui-bundle.js",
        swagger_css_url=f"{root}/static/swagger/swagger-ui.css",
        swagger_favicon_url="",
    )


def _unprocessable(field: list[str | int], msg: str) -> HTTPException:
    err = {"loc": ["body", *field], "msg": msg, "type": "value_error"}  # FastAPI's 422 shape
    return HTTPException(status_code=422, detail=[err])


_ERROR_TEXT = {
    400: "the body is not JSON text (FastAPI could not parse it)",
    401: "no bearer token (Authorization: Bearer <token>)",
    403: "a token that may not do this",
    404: "no such job (unknown, or expired after job_ttl_s)",
    408: "the request body stopped arriving (limits.body_read_timeout_s)",
    409: "conflicts with the service's state (an existing id, a version that does not grow)",
    413: "request body over limits.max_body_bytes",
    429: "the service is at an open-work limit: retry after Retry-After seconds",
    503: "unavailable (shutting down, no replica, or the job failed)",
    504: "past request_timeout_s or weight_update_timeout_s",
}


def _errors(*codes: int, model: type[BaseModel] = ErrorBody) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of a route that answers ``codes`` (documented in /openapi.json) with
    ``model`` bodies (a route with a shape of its own names it)."""
    return {c: {"model": model, "description": _ERROR_TEXT[c]} for c in codes}


# any route with a body (app.serve.ingress.body_limits; 400: not JSON)
_BODY_ERRORS = (400, 408, 413)


def _json_safe(value: Any) -> Any:
    """``value`` with what JSON cannot carry (NaN, Infinity, exceptions, bytes) as text."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {_json_safe(str(k)): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, str):  # a lone surrogate would fail the answer's encoding (a 500)
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if value is None or isinstance(value, bool | int | float):
        return value
    return repr(value)


@api.exception_handler(StarletteHTTPException)
async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    """FastAPI's own answer to an HTTP error, but a 405's ``Allow`` names every method of the
    path: each route holds one method, and Starlette listed only the first matching route's."""
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        allow: set[str] = set()
        for route in api.router.routes:
            methods = getattr(route, "methods", None)
            if methods and route.matches(request.scope)[0] is not Match.NONE:
                allow |= set(methods)
        headers["Allow"] = ", ".join(sorted(allow))
    if exc.status_code in (204, 304):
        return Response(status_code=exc.status_code, headers=headers)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=headers)


@api.exception_handler(RequestValidationError)
async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    detail = [
        {
            k: _json_safe(v)
            for k, v in err.items()
            # the input of an error about the whole body is the body: not echoed back
            if k in ("loc", "msg", "type") or (k == "input" and len(err.get("loc", ())) > 1)
        }
        for err in exc.errors()
    ]
    return JSONResponse(status_code=422, content={"detail": detail})


def _http(exc: JobError) -> HTTPException:
    headers = None
    if exc.retry_after_s is not None:
        headers = {"Retry-After": str(math.ceil(exc.retry_after_s))}
    if exc.status == 422:  # a 422 is a list of field errors (documented): the scheduler's rules
        # span fields (prompts x group_size, prompt + max_tokens, ...), so the body is named
        detail: Any = [{"loc": ["body"], "msg": exc.message, "type": "value_error"}]
        return HTTPException(status_code=422, detail=detail, headers=headers)
    return HTTPException(status_code=exc.status, detail=exc.message, headers=headers)


@serve.deployment(ray_actor_options={"num_cpus": 0.25}, max_ongoing_requests=1000)
@serve.ingress(api)
class Ingress:
    async def __init__(self, config: ServiceConfig, scheduler: Any) -> None:  # type: ignore[misc]
        logs.configure()
        self.config = config
        self.scheduler = SchedulerHandle(scheduler)
        api.state.body_limits = (config.limits.max_body_bytes, config.limits.body_read_timeout_s)
        self._background = Background()  # submissions and cancels outliving their caller
        self._started = int(time.time())
        token = config.operator_token
        self._operator_token = configured_token(token.get_secret_value() if token else None)
        # The model's tokenizer, loaded here (not through an engine replica); blocking, so in a
        # thread under the engine's start deadline.
        self.codec: TextCodec = await asyncio.wait_for(
            asyncio.to_thread(make_codec, config.engine), config.engine.start_timeout_s
        )
        # The schema of this module's app as imported here: Serve runs a copy of this class and
        # of the app pickled with the globals they use, and FastAPI's schema of that copy says
        # "example": {} for every parameter and body (it tells an unset example by the identity
        # of a marker object, which pickling copies).
        from app.serve.ingress import deployment as module

        self._openapi = deployment_schema(
            module.api.openapi(),
            max_model_len=config.engine.max_model_len,
            vocab_size=self.codec.vocab_size,
            logprobs_mode=config.engine.logprobs_mode,
        )

    async def _ask(self, call: Awaitable[T]) -> T:
        """The scheduler's answer to ``call``; its refusal as the HTTP error it names."""
        try:
            return await call
        except JobError as exc:
            raise _http(exc) from None

    @api.get("/openapi.json", include_in_schema=False)
    async def openapi(self, request: Request) -> JSONResponse:
        """The schema of this deployment: the app's, with its model's bounds (token ids,
        generated tokens, logprobs mode; ``app.serve.ingress.schema``). Under a root path
        it lists that path as its server, as FastAPI's own route does."""
        root = request.scope.get("root_path", "").rstrip("/")
        if not root:
            return JSONResponse(self._openapi)
        return JSONResponse({**self._openapi, "servers": [{"url": root}]})

    # ------------------------------------------------------------------ health, metrics
    @api.get("/healthz", response_model=ServiceHealth, responses=_errors(503))
    async def healthz(self) -> JSONResponse:
        """Every replica's state and load, answered from the scheduler's last probes (at once;
        503 while no replica is in rotation)."""
        try:
            health: ServiceHealth = await asyncio.wait_for(
                self.scheduler.health(), self.config.replica_call_timeout_s
            )
        except Exception as exc:  # noqa: BLE001 - the scheduler itself is unreachable
            raise HTTPException(503, f"scheduler unreachable: {exc!r}") from exc
        code = 503 if health.status == "unavailable" else 200
        return JSONResponse(status_code=code, content=health.model_dump(mode="json"))

    # ------------------------------------------------------------------ operator tuning
    @api.get("/v1/speculation", response_model=SpeculationState)
    async def get_speculation(self) -> SpeculationState:
        """Current drafting settings, their version and audit fields, and the version each
        replica runs (-1: it has not confirmed the current one)."""
        state: SpeculationState = await self._ask(self.scheduler.speculation())
        return state

    @api.put(
        "/v1/speculation",
        response_model=SpeculationState,
        responses=_errors(401, 403, *_BODY_ERRORS),
    )
    async def put_speculation(
        self,
        update: SpeculationUpdate,
        authorization: str | None = Header(None),
        x_operator: str | None = Header(None, max_length=100),
    ) -> SpeculationState:
        """Change drafting settings on every replica, live (fields not given keep their
        value). ``Authorization: Bearer <token>``: missing -> 401, wrong -> 403. ``X-Operator``
        names who changed them in the audit log."""
        authorize(self._operator_token, authorization)
        state: SpeculationState = await self._ask(
            self.scheduler.update_speculation(
                settings_patch(update), x_operator or "operator", update.reason
            )
        )
        return state

    @api.get(
        "/metrics",
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus text"}},
    )
    async def metrics(self) -> Response:
        """Prometheus text format."""
        body: bytes = await self._ask(self.scheduler.metrics())
        return Response(content=body, media_type=CONTENT_TYPE)

    # ------------------------------------------------------------------ jobs
    async def _prompt_ids(self, req: RolloutRequest) -> list[list[int]]:
        max_len = self.config.engine.max_model_len
        vocab = self.codec.vocab_size
        if req.max_tokens >= max_len:
            raise _unprocessable(
                ["max_tokens"],
                f"max_tokens={req.max_tokens} must be below the model context of {max_len} tokens",
            )
        if req.prompt_ids is not None and len(req.prompt_ids) != len(req.prompts):
            raise _unprocessable(
                ["prompt_ids"],
                f"{len(req.prompt_ids)} prompt_ids for {len(req.prompts)} prompts",
            )
        for i, p in enumerate(req.prompts):
            if len(p) == 0:
                raise _unprocessable(["prompts", i], "prompt is empty")
            if isinstance(p, list):
                bad = [t for t in p if not 0 <= t < vocab]
                if bad:
                    raise _unprocessable(
                        ["prompts", i], f"token ids {bad[:5]} outside the vocabulary [0, {vocab})"
                    )
        texts = [(i, p) for i, p in enumerate(req.prompts) if isinstance(p, str)]
        per_token = self.codec.max_token_bytes
        for i, p in texts:  # an oversized text is refused before it is tokenized (seconds)
            n_bytes = len(p.encode())
            at_least = -(-n_bytes // per_token)
            if at_least + req.max_tokens > max_len:
                raise _unprocessable(
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
                raise _unprocessable(
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
        self, req: RolloutRequest, job_id: str | None = None, cancel_digest: str | None = None
    ) -> str:
        """Validate against the model, tokenize, submit; returns the job id. ``cancel_digest``:
        of the token its submitter may cancel it with (None: the operator only)."""
        if req.policy is not None:  # only then is the running policy worth a round trip
            running: str = await self._ask(self.scheduler.policy())
            if req.policy != running:
                raise _unprocessable(
                    ["policy"],
                    f"the service runs policy {running!r}, not {req.policy!r} (the policy is "
                    "the scheduler deployment's user_config; see README)",
                )
        mode = self.config.engine.logprobs_mode
        if req.logprobs_mode is not None and req.logprobs_mode != mode:
            raise _unprocessable(
                ["logprobs_mode"],
                f"the service's engines return {mode!r} logprobs, not {req.logprobs_mode!r} "
                "(engine.logprobs_mode in the service config; fixed at engine start)",
            )
        prompts = await self._prompt_ids(req)
        plan = expand(job_id or uuid.uuid4().hex[:12], req, prompts, mode)
        plan.cancel_digest = cancel_digest
        status: JobStatus = await self._ask(self.scheduler.submit(plan))
        return status.id

    async def _run(
        self, req: RolloutRequest, job_id: str | None = None, partial: bool = False
    ) -> tuple[str, JobOutcome]:
        """Submit the job and wait until it is terminal. A caller that goes away, while the
        job is being submitted or after, cancels it: once its submission is through (the job
        exists) the cancel goes to the scheduler, and a cancel that is slow to answer is not
        withdrawn. A submission that failed cancels nothing (the id may be another's job)."""
        job_id = job_id or uuid.uuid4().hex[:12]
        # detached: the request's cancellation must not cancel the submission under way
        submit = self._background.keep(self._submit(req, job_id))
        try:
            await asyncio.shield(submit)
            outcome: JobOutcome = await self._ask(self.scheduler.wait(job_id, partial))
        except asyncio.CancelledError:  # the caller went away: stop generating for nobody
            self._background.keep(self._cancel_submitted(submit, job_id))
            raise
        return job_id, outcome

    async def _cancel_submitted(self, submit: asyncio.Future[str], job_id: str) -> None:
        bound = self.config.replica_call_timeout_s
        await asyncio.wait([submit], timeout=bound)
        if not submit.done() or submit.cancelled() or submit.exception() is not None:
            return  # not submitted (within the bound): there is no job of ours to cancel
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

    @staticmethod
    def _failed(outcome: JobOutcome) -> HTTPException:
        st = outcome.status
        code = 504 if st.error and "request_timeout_s" in st.error else 503
        return HTTPException(code, f"rollout {st.id} {st.state.value}: {st.error}")

    @api.post(
        "/v1/rollouts",
        status_code=202,
        response_model=JobAccepted | RolloutResponse,
        responses={
            200: {"model": RolloutResponse},
            202: {"model": JobAccepted},
            **_errors(409, 429, 503, 504, *_BODY_ERRORS),
        },
    )
    async def rollouts(self, req: RolloutRequest, request: Request) -> Any:
        """Start a rollout job: 202 with its URLs, or (``"wait": true``) 200 with every group
        when it is done (504 past request_timeout_s, 503 when it failed)."""
        if not req.wait:
            token, digest = new_cancel_token()
            job_id = await self._submit(req, cancel_digest=digest)
            base = str(request.base_url).rstrip("/")
            accepted = JobAccepted(
                id=job_id,
                status_url=f"{base}/v1/rollouts/{job_id}",
                groups_url=f"{base}/v1/rollouts/{job_id}/groups",
                cancel_token=token,
            )
            return JSONResponse(status_code=202, content=accepted.model_dump())
        job_id, outcome = await self._run(req)
        st = outcome.status
        if st.state is not JobState.DONE:
            raise self._failed(outcome)
        groups = await self._decode(outcome.groups)
        done = RolloutResponse(
            id=job_id,
            model=self.config.engine.model,
            policy=st.policy,
            seed_guarantee=st.seed_guarantee,
            groups=groups,
            stats=rollout_stats(groups, st.created_at),
        )
        return JSONResponse(status_code=200, content=done.model_dump(mode="json"))

    @api.get("/v1/rollouts/{job_id}", response_model=JobStatus, responses=_errors(404))
    async def job_status(self, job_id: str) -> JobStatus:
        """State and progress (groups and requests done, tokens, elapsed, estimated remaining)."""
        status: JobStatus = await self._ask(self.scheduler.status(job_id))
        return status

    @api.delete(
        "/v1/rollouts/{job_id}",
        response_model=JobStatus,
        responses=_errors(401, 403, 404),
    )
    async def cancel(self, job_id: str, authorization: str | None = Header(None)) -> JobStatus:
        """Cancel: the job's chunks are aborted on the engines and stop using capacity; the job
        stays readable (state cancelled, or the state it had ended in: cancelling is idempotent)
        until job_ttl_s. Needs ``Authorization: Bearer <token>``: the job's ``cancel_token``
        (from its 202) or the operator token."""
        if is_operator(self._operator_token, authorization):
            status: JobStatus = await self._ask(self.scheduler.cancel(job_id))
            return status
        given = bearer(authorization)
        if given is None:
            raise HTTPException(
                401,
                "cancelling a job needs Authorization: Bearer <token>, the cancel_token its "
                "submission returned (or the operator token)",
                headers={"WWW-Authenticate": "Bearer"},
            )
        status = await self._ask(self.scheduler.cancel(job_id, token_digest(given)))
        return status

    @api.get(
        "/v1/rollouts/{job_id}/groups",
        responses={200: {"content": {"application/x-ndjson": {}}}, **_errors(404)},
    )
    async def groups(self, job_id: str) -> StreamingResponse:
        """NDJSON: one GroupResult per line in completion order, ending when the job ends
        (then GET /v1/rollouts/{id} tells whether it is done, failed or cancelled)."""
        await self._ask(self.scheduler.status(job_id))  # 404 before the stream starts
        stream = self.scheduler.stream_groups(job_id)

        async def lines() -> AsyncIterator[bytes]:
            async for group in stream:
                [named] = await self._decode([group])
                yield (json.dumps(named.model_dump(mode="json")) + "\n").encode()

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    # ------------------------------------------------------------------ trainer endpoints
    @staticmethod
    def _native(build: Callable[[], RolloutRequest]) -> RolloutRequest:
        try:
            return build()
        except ValidationError as exc:
            detail = [
                {"loc": ["body", *e["loc"]], "msg": e["msg"], "type": e["type"]}
                for e in exc.errors()
            ]
            raise HTTPException(status_code=422, detail=detail) from None
        except ValueError as exc:
            raise _unprocessable([], str(exc)) from None

    @staticmethod
    async def _in_their_fields(
        req: CompletionRequest | GenerateRequest, work: Callable[[], Awaitable[T]]
    ) -> T:
        """``work`` on the native job ``req`` became; a 422 about that job names ``req``'s own
        fields (``n``, ``sampling_params.max_new_tokens``, ``input_ids``), not the job's."""
        try:
            return await work()
        except HTTPException as exc:
            if exc.status_code != 422 or not isinstance(exc.detail, list):
                raise
            detail = [{**e, "loc": ["body", *req.own_loc(e["loc"][1:])]} for e in exc.detail]
            raise HTTPException(status_code=422, detail=detail, headers=exc.headers) from None

    @api.get("/v1/models", response_model=ModelList)
    async def models(self) -> ModelList:
        """OpenAI's model list: the model this service runs (clients call it first)."""
        return ModelList(data=[ModelCard(id=self.config.engine.model, created=self._started)])

    @api.post(
        "/v1/completions",
        response_model=CompletionResponse,
        responses=_errors(409, 429, 503, 504, *_BODY_ERRORS),
    )
    async def completions(self, req: CompletionRequest) -> JSONResponse:
        """OpenAI completions (subset): each prompt is a group of ``n`` choices; token ids,
        logprobs and the policy version of every choice (see ``app.compat.openai``)."""
        job_id, outcome = await self._in_their_fields(
            req, lambda: self._run(self._native(req.to_rollout))
        )
        if outcome.status.state is not JobState.DONE:
            raise self._failed(outcome)
        out = await asyncio.to_thread(
            completion_response,
            req,
            outcome.groups,
            job_id,
            self.config.engine.model,
            int(outcome.status.created_at),
            self.codec.decode,
        )
        return JSONResponse(content=out.model_dump(mode="json"))

    @api.post("/generate", responses=_errors(409, 429, 503, 504, *_BODY_ERRORS))
    async def generate(self, req: GenerateRequest) -> JSONResponse:
        """SGLang-style generate (see ``app.compat.sglang``): answers when the call is done or
        aborted (``/abort_request``: the tokens so far, finish reason ``abort``)."""
        job_id, outcome = await self._in_their_fields(
            req, lambda: self._run(self._native(req.to_rollout), req.rid, partial=True)
        )
        if outcome.status.state not in (JobState.DONE, JobState.CANCELLED):
            raise self._failed(outcome)
        out = await asyncio.to_thread(
            generate_response, req, outcome.groups, job_id, self.codec.decode
        )
        return JSONResponse(content=out)

    @api.post("/abort_request", responses=_errors(401, 403, *_BODY_ERRORS))
    async def abort_request(
        self, req: AbortRequest, authorization: str | None = Header(None)
    ) -> dict[str, list[str]]:
        """Abort one ``/generate`` call by its ``rid`` (the caller's own id: choose it
        unguessable), or every open job (``abort_all``: an operator change, it needs
        ``Authorization: Bearer <operator token>``); an unknown or finished rid aborts
        nothing."""
        if req.abort_all:
            authorize(self._operator_token, authorization)
            ids: list[str] = await self._ask(self.scheduler.cancel_all("aborted by /abort_request"))
            return {"aborted": ids}
        try:
            status: JobStatus = await self._ask(self.scheduler.cancel(req.rid))
        except HTTPException:  # no such call (404): nothing to abort
            return {"aborted": []}
        return {"aborted": [req.rid] if status.state is JobState.CANCELLED else []}

    async def _update_weights(
        self,
        path: str,
        version: int | None,
        abort_running: bool,
        authorization: str | None,
        field: str = "path",
        sha256: str | None = None,
    ) -> WeightsUpdate:
        authorize(self._operator_token, authorization)
        root = self.config.weights_root
        real = await asyncio.to_thread(os.path.realpath, path)
        if root is not None:
            real_root = await asyncio.to_thread(os.path.realpath, root)
            if os.path.commonpath([real, real_root]) != real_root:
                raise _unprocessable(
                    [field],
                    f"weights path {path!r} (resolved: {real!r}) is outside weights_root {root!r}",
                )
        if not await asyncio.to_thread(os.path.isdir, real):
            raise _unprocessable([field], f"weights path {path!r} is not a directory")
        update: WeightsUpdate = await self._ask(
            self.scheduler.update_weights(real, version, abort_running, sha256)
        )
        return update

    @api.post(
        "/v1/weights",
        response_model=WeightsUpdate,
        responses=_errors(401, 403, 409, 503, 504, *_BODY_ERRORS),
    )
    async def update_weights(
        self, req: WeightsUpdateRequest, authorization: str | None = Header(None)
    ) -> WeightsUpdate:
        """Load new policy weights into every engine replica between chunks (operator bearer
        token): dispatch pauses, running chunks finish (or are aborted), unfinished requests
        restart from their prompt under the new version, dispatch resumes."""
        return await self._update_weights(
            req.path, req.version, req.abort_running, authorization, sha256=req.sha256
        )

    @api.get("/v1/weights", response_model=WeightsState)
    async def weights(self) -> WeightsState:
        """The policy version every new token is sampled with, and where it came from."""
        state: WeightsState = await self._ask(self.scheduler.weights())
        return state

    @api.post(
        "/update_weights_from_disk",
        response_model=DiskWeightsResponse,
        # SGLang's shape for its errors too: {"success": false, "message", "num_paused_requests"};
        # what is refused before it runs has the app's (a body that is not JSON or too large, a
        # 422 of the body's validation)
        responses={
            **_errors(401, 403, 409, 503, 504, model=DiskWeightsResponse),
            **_errors(*_BODY_ERRORS),
            422: {
                "description": "the body's validation (HTTPValidationError), or a path that is "
                "not a directory under weights_root (DiskWeightsResponse)",
                "content": {"application/json": {"schema": {"anyOf": [
                    {"$ref": "#/components/schemas/HTTPValidationError"},
                    {"$ref": "#/components/schemas/DiskWeightsResponse"},
                ]}}},
            },
        },
    )  # fmt: skip
    async def update_weights_from_disk(
        self, req: DiskWeightsRequest, authorization: str | None = Header(None)
    ) -> JSONResponse:
        """``POST /v1/weights`` in SGLang's shape: ``{"model_path", "weight_version",
        "abort_all_requests"}`` -> ``{"success", "message", "num_paused_requests"}``."""
        try:
            update = await self._update_weights(
                req.model_path,
                req.version(),
                req.abort_all_requests,
                authorization,
                "model_path",
                req.sha256,
            )
        except HTTPException as exc:
            detail = exc.detail
            if isinstance(detail, list):  # a 422's [{"loc", "msg"}]: its messages
                detail = "; ".join(str(d.get("msg", d)) for d in detail)
            body = {"success": False, "message": str(detail), "num_paused_requests": 0}
            return JSONResponse(status_code=exc.status_code, content=body, headers=exc.headers)
        return JSONResponse(
            content={
                "success": True,
                "message": f"weights v{update.version} loaded in {update.seconds:.1f} s",
                "num_paused_requests": update.restarted_requests,
                "policy_version": update.version,
            }
        )
