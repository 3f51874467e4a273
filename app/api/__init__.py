"""The HTTP API's wire models (pydantic): every request and response body of every endpoint,
one module per surface. Importing it loads pydantic and ``core.engine``'s types, never Ray.

- ``app.api.base``: what every request model shares (strictness, prompts, Unicode text);
- ``app.api.native``: the job API (``/v1/rollouts``);
- ``app.api.trainer``: what RL trainers already send (OpenAI completions, SGLang);
- ``app.api.operator``: the service's state and operator controls (health, speculation,
  weights);
- ``app.api.errors``: error bodies.

Two models inside them are the engine's own, defined in ``core.engine`` (``core`` cannot import
``app``) and re-exported here: ``SamplingParams`` (``RolloutRequest.sampling``) and
``EngineLoad`` (``ReplicaHealth.load``). Every name is importable from ``app.api`` itself.
"""

from app.api.base import (
    STRICT,
    ClientRequest,
    NoStream,
    PromptIds,
    PromptText,
    TokenIds,
    lone_surrogate,
)
from app.api.errors import ErrorBody, FieldError, ValidationErrorBody
from app.api.native import (
    SEED_GUARANTEE_DOC,
    GroupResult,
    JobAccepted,
    JobProgress,
    JobState,
    JobStatus,
    Response,
    RolloutRequest,
    RolloutResponse,
    RolloutStats,
    SeedGuarantee,
)
from app.api.operator import (
    ReplicaHealth,
    ReplicaSpeculation,
    ReplicaState,
    ServiceHealth,
    SpeculationState,
    SpeculationUpdate,
    WeightsState,
    WeightsUpdate,
    WeightsUpdateRequest,
    WriterStats,
)
from app.api.trainer import (
    AbortRequest,
    AbortResponse,
    Choice,
    ChoiceLogprobs,
    CompletionRequest,
    CompletionResponse,
    DiskWeightsRequest,
    DiskWeightsResponse,
    GenerateAbort,
    GenerateAnswer,
    GenerateFinish,
    GenerateLength,
    GenerateMeta,
    GenerateOutput,
    GenerateRequest,
    GenerateStop,
    ModelCard,
    ModelList,
    SGLangSampling,
    TokenLogprob,
    Usage,
    native_rollout,
)
from core.engine import EngineLoad, SamplingParams

__all__ = [
    "SEED_GUARANTEE_DOC",
    "STRICT",
    "AbortRequest",
    "AbortResponse",
    "Choice",
    "ChoiceLogprobs",
    "ClientRequest",
    "CompletionRequest",
    "CompletionResponse",
    "DiskWeightsRequest",
    "DiskWeightsResponse",
    "EngineLoad",
    "ErrorBody",
    "FieldError",
    "GenerateAbort",
    "GenerateAnswer",
    "GenerateFinish",
    "GenerateLength",
    "GenerateMeta",
    "GenerateOutput",
    "GenerateRequest",
    "GenerateStop",
    "GroupResult",
    "JobAccepted",
    "JobProgress",
    "JobState",
    "JobStatus",
    "ModelCard",
    "ModelList",
    "NoStream",
    "PromptIds",
    "PromptText",
    "ReplicaHealth",
    "ReplicaSpeculation",
    "ReplicaState",
    "Response",
    "RolloutRequest",
    "RolloutResponse",
    "RolloutStats",
    "SGLangSampling",
    "SamplingParams",
    "SeedGuarantee",
    "ServiceHealth",
    "SpeculationState",
    "SpeculationUpdate",
    "TokenIds",
    "TokenLogprob",
    "Usage",
    "ValidationErrorBody",
    "WeightsState",
    "WeightsUpdate",
    "WeightsUpdateRequest",
    "WriterStats",
    "lone_surrogate",
    "native_rollout",
]
