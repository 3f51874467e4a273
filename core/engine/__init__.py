"""Chunk-level engine interface: the typed contract between the scheduler and engine replicas."""

from core.engine.types import (
    ChunkRequest,
    ChunkResult,
    EngineLoad,
    FinishReason,
    PolicyCheckpoint,
    SamplingParams,
)

__all__ = [
    "ChunkRequest",
    "ChunkResult",
    "EngineLoad",
    "FinishReason",
    "PolicyCheckpoint",
    "SamplingParams",
]
