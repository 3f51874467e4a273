"""Configuration of the Serve application (the ``args`` of serve_config.yaml).

``AppConfig`` = ``ServiceConfig`` (fixed for the life of the deployments) + ``policy`` (the
scheduler deployment's ``user_config``: changing it reconfigures the running scheduler, nothing
restarts).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from app.engines.config import EngineConfig
from app.env import database_url, operator_token
from app.store.config import StoreConfig
from core.drafting.step_drafter import DraftSettings
from core.scheduling.config import DEFAULT_CHUNK_TOKENS, SchedulerConfig
from core.scheduling.policies import PolicyKind, PolicyPlan, get_policy, policies_of

#: Policies of ``core.scheduling.policies`` the Serve app runs (derived, never listed by hand):
#: every kind but the yardsticks (they need the true lengths), recommended first. Length priors
#: come from the store (``context-prior`` runs without one when the store is off); speculating
#: policies (``seer``) draft on replicas whose engine speculates (vLLM with
#: ``speculation.method: grouped``, the default) and run as their non-speculating twin elsewhere.
SERVICE_POLICIES = tuple(
    name for kind in PolicyKind if kind is not PolicyKind.YARDSTICK for name in policies_of(kind)
)


#: The policy of a config that names none: divided rollout + context-aware ordering, which needs
#: no speculating engine (on CPU speculation costs more than it saves; the GPU config runs seer).
DEFAULT_POLICY = "context"


def check_policy(name: str) -> str:
    """``name`` if the service can run it, else ValueError naming the valid names."""
    if name not in SERVICE_POLICIES:
        raise ValueError(f"unknown policy {name!r}; valid names: {', '.join(SERVICE_POLICIES)}")
    return name


class ServiceLimits(BaseModel):
    """Admission limits. A job larger than a per-job limit is refused with 422 (it could never
    be admitted); a job that would push the service over a total gets 429 + Retry-After."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_open_jobs: int = Field(64, ge=1, le=100_000, description="jobs queued or running")
    max_open_requests: int = Field(
        65_536, ge=1, le=10_000_000, description="requests (responses) of open jobs, in total"
    )
    max_open_tokens: int = Field(
        2**31, ge=1, le=2**40, description="sum over open jobs of requests x max_tokens"
    )
    max_job_requests: int = Field(
        16_384, ge=1, le=10_000_000, description="requests (prompts x group_size) of one job"
    )
    max_job_tokens: int = Field(
        2**28, ge=1, le=2**40, description="requests x max_tokens of one job"
    )
    retry_after_s: int = Field(
        5,
        ge=1,
        le=3600,
        description="Retry-After sent with 429, and with 503 when the scheduler restarted",
    )
    max_body_bytes: int = Field(
        64 * 2**20,
        ge=1024,
        le=2**30,
        description="largest request body (bytes); a larger one is 413 before it is parsed",
    )
    body_read_timeout_s: float = Field(
        10.0,
        gt=0,
        le=600,
        description="longest wait for the next part of a request body; then 408",
    )


class DraftServerConfig(BaseModel):
    """The draft server (DGDS, ``app.serve.replica.draft_server``): group texts shared by the engine
    replicas' grouped drafters (``core.drafting.shared``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(True, description="run it (off: each replica drafts from its own data)")
    sync_period_s: float = Field(
        0.05,
        ge=0.001,
        le=60,
        description="a replica with speculating chunks running exchanges tokens this often "
        "(the staleness of siblings' text in its drafts)",
    )
    call_timeout_s: float = Field(
        2.0, gt=0, le=600, description="bound on one exchange; past it the replica drafts locally"
    )
    max_groups: int = Field(65_536, ge=1, le=10_000_000, description="groups held at most")
    max_tokens: int = Field(
        50_000_000, ge=1, le=2**40, description="tokens held at most (least recently used go)"
    )
    group_ttl_s: float = Field(
        3600.0, gt=0, le=604_800, description="a group nobody pushed to this long is dropped"
    )


class ServiceConfig(BaseModel):
    """Everything but the policy: changing any of it restarts the deployments."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_replicas: int = Field(2, ge=1, le=256, description="engine replicas (one engine each)")
    engine: EngineConfig = Field(default_factory=EngineConfig)
    chunk_tokens: int = Field(
        DEFAULT_CHUNK_TOKENS,
        ge=1,
        le=1_048_576,
        description="divided policies: most new tokens per chunk before a request is re-queued",
    )
    replica_num_cpus: float = Field(
        0.5, gt=0, le=64, description="Ray CPUs reserved per engine replica (<= 0.5 on 2 cores)"
    )
    gpus_per_replica: float = Field(
        0.0,
        ge=0,
        le=64,
        description="GPUs reserved for each engine replica (app.serve.replica.placement): 0 = "
        "none, CPU engines (the default); (0, 1] at engine.tensor_parallel_size 1 (a fraction "
        "shares one GPU between replicas); exactly engine.tensor_parallel_size above 1",
    )
    placement_strategy: Literal["STRICT_PACK", "PACK"] = Field(
        "STRICT_PACK",
        description="Ray placement group strategy of a GPU replica's bundles (more than one only "
        "with engine.executor ray): STRICT_PACK = all on one node; PACK = one node where they "
        "fit, else several",
    )
    control_resources: dict[str, float] = Field(
        default_factory=dict,
        description="Ray resources the control deployments (ingress, scheduler, draft server) "
        "ask for, which keeps them off the GPU nodes: {'node:__internal_head__': 0.001} = the "
        "head node; a custom resource a CPU node was started with (ray start --resources "
        "'{\"seer_control\": 1}') = that node; {} = anywhere (the default)",
    )
    request_timeout_s: float = Field(
        3600.0,
        gt=0,
        le=86_400,
        description="a job older than this is cancelled (504 for a waiting caller)",
    )
    job_ttl_s: float = Field(
        600.0, ge=0, le=604_800, description="finished jobs stay readable this long"
    )
    replica_call_timeout_s: float = Field(
        5.0,
        gt=0,
        le=600,
        description="bound on a health probe or abort sent to one replica (a dead replica is "
        "not waited for longer)",
    )
    health_period_s: float = Field(
        2.0, gt=0, le=600, description="replica health probes are this far apart"
    )
    max_replica_failures: int = Field(
        3,
        ge=1,
        le=1000,
        description="a replica that loses chunks this many times within failure_window_s is "
        "taken out of rotation for good (health state 'failed')",
    )
    failure_window_s: float = Field(600.0, gt=0, le=86_400)
    max_chunk_retries: int = Field(
        3,
        ge=0,
        le=100,
        description="a request whose chunks were lost to failed replicas more often fails its job",
    )
    shutdown_grace_s: float = Field(
        30.0, ge=0, le=3600, description="on SIGTERM, running jobs get this long to finish"
    )
    limits: ServiceLimits = Field(default_factory=ServiceLimits)
    draft_server: DraftServerConfig = Field(
        default_factory=DraftServerConfig,
        description="the draft server sharing group texts across replicas (speculation only)",
    )
    operator_token: SecretStr | None = Field(
        None,
        description="bearer token of operator endpoints (PUT /v1/speculation); None = the "
        "SEER_OPERATOR_TOKEN environment variable; neither = operator changes refused (403)",
    )
    store: StoreConfig = Field(
        default_factory=StoreConfig,
        description="history store: whether and where events are recorded (app/store)",
    )
    weights_root: str | None = Field(
        None,
        description="directory that weight updates (POST /v1/weights, /update_weights_from_disk) "
        "may load from: a path outside it, also through a symlink, is 422. None: any directory "
        "the service can read (the operator token still guards every update)",
    )
    weight_update_timeout_s: float = Field(
        600.0,
        gt=0,
        le=86_400,
        description="bound on a weight update: running chunks finishing, then every replica "
        "loading the new weights (POST /v1/weights answers 504 past it)",
    )

    @field_validator("weights_root")
    @classmethod
    def _absolute_root(cls, v: str | None) -> str | None:
        if v is not None and not os.path.isabs(v):
            raise ValueError(f"weights_root must be an absolute path, got {v!r}")
        return v

    @field_validator("control_resources")
    @classmethod
    def _positive_amounts(cls, v: dict[str, float]) -> dict[str, float]:
        for name, amount in v.items():
            if not name or not 0 < amount <= 1_000_000:
                raise ValueError(
                    f"control_resources[{name!r}]={amount}: a resource needs a name and an "
                    "amount in (0, 1e6]"
                )
        return v

    @model_validator(mode="after")
    def _gpus_match_the_engine(self) -> ServiceConfig:
        gpus, tp = self.gpus_per_replica, self.engine.tensor_parallel_size
        if tp > 1 and gpus != tp:
            raise ValueError(
                f"gpus_per_replica={gpus:g} must equal engine.tensor_parallel_size={tp} (one GPU "
                "per tensor-parallel worker)"
            )
        if tp == 1 and gpus > 1:
            raise ValueError(
                f"gpus_per_replica={gpus:g} with engine.tensor_parallel_size=1: an engine uses one "
                "GPU; set tensor_parallel_size to split it over more"
            )
        util = self.engine.gpu_memory_utilization
        if 0 < gpus < 1 and util > gpus:
            raise ValueError(
                f"engine.gpu_memory_utilization={util:g} exceeds gpus_per_replica={gpus:g}: "
                "replicas that share a GPU each take gpu_memory_utilization of its memory, so "
                f"the second could never start; set it to at most {gpus:g} (say "
                f"{0.85 * gpus:.3g})"
            )
        return self

    @property
    def on_gpu(self) -> bool:
        """The engine replicas reserve GPUs."""
        return self.gpus_per_replica > 0

    def engines_draft(self, policy_speculates: bool) -> bool:
        """Chunks may carry draft tokens: vLLM's ngram drafts for every chunk; grouped vLLM and
        the sim engine draft for the chunks of a speculating policy; fake engines never."""
        e = self.engine
        if e.backend == "vllm" and e.speculation.method == "ngram":
            return True
        return policy_speculates and (
            e.backend == "sim" or (e.backend == "vllm" and e.speculation.method == "grouped")
        )

    def shares_drafts(self) -> bool:
        """The app runs a draft server: it is enabled and the engines draft from group texts
        (the sim backend, or vLLM with grouped speculation)."""
        e = self.engine
        drafts = e.backend == "sim" or (e.backend == "vllm" and e.speculation.method == "grouped")
        return self.draft_server.enabled and drafts

    def scheduler_base(self) -> SchedulerConfig:
        # No KV pool between replicas here: moving a long request would recompute its whole
        # context, so the simulator's rebalancing of long requests is off.
        return SchedulerConfig(chunk_tokens=self.chunk_tokens, rebalance_tokens=0)

    def resolve_policy(self, name: str) -> PolicyPlan:
        """The policy object of ``name``; ValueError naming the valid names."""
        return get_policy(check_policy(name), self.scheduler_base())

    def with_environment(self) -> Self:
        """This config with what this process's environment gives for what it leaves unset
        written in: ``$SEER_DATABASE_URL`` as ``store.database_url``, ``$SEER_OPERATOR_TOKEN``
        as ``operator_token``. A deployment on another node reads its raylet's environment, not
        the one ``seer serve`` ran in, so what the command resolved travels in the config it
        deploys (the README's cluster recipe exports the URL)."""
        fields = self.model_dump()
        url = database_url()
        if url and self.store.database_url is None:
            fields["store"] = {**fields["store"], "database_url": url}
        token = operator_token()
        if token and self.operator_token is None:
            fields["operator_token"] = token
        return type(self).model_validate(fields) if fields != self.model_dump() else self


class AppConfig(ServiceConfig):
    policy: str = Field(
        DEFAULT_POLICY,
        description="scheduling policy of the service (SERVICE_POLICIES); live-changeable; "
        "default context (serve_config.gpu.yaml: seer); verl is the baseline",
    )
    speculation: DraftSettings | None = Field(
        None,
        description="grouped-drafting settings applied live to every replica (enabled, "
        "max_draft, min_token_prob, adaptive, probe_priority); None = engine.speculation.settings",
    )

    _known_policy = field_validator("policy")(check_policy)

    def service(self) -> ServiceConfig:
        return ServiceConfig.model_validate(self.model_dump(exclude={"policy", "speculation"}))

    def user_config(self) -> dict[str, Any]:
        """The scheduler deployment's ``user_config`` (``SchedulerUserConfig``)."""
        out: dict[str, Any] = {"policy": self.policy}
        if self.speculation is not None:
            out["speculation"] = dataclasses.asdict(self.speculation)
        return out


class SchedulerUserConfig(BaseModel):
    """The scheduler deployment's ``user_config`` (live: ``serve deploy`` / ``serve.run`` with a
    new value calls ``reconfigure``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: str = Field(DEFAULT_POLICY, description="scheduling policy (SERVICE_POLICIES)")
    speculation: DraftSettings | None = Field(
        None, description="drafting settings for every replica, live; None = leave as they are"
    )

    _known_policy = field_validator("policy")(check_policy)
