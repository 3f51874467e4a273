"""Engine replica configuration (crosses Ray and YAML, so pydantic with documented bounds)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class EngineConfig(BaseModel):
    """How to start one engine replica."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: str = Field("vllm", description="engine registry name: vllm | fake")
    model: str = Field(
        "smollm2-135m-instruct",
        description="prepared model name (smollm2-135m-instruct, tiny-llama) or a model folder",
    )
    dtype: str = Field("float32", description="torch dtype for vLLM: float32 | bfloat16 | float16")
    max_model_len: int = Field(2048, ge=16, le=1_048_576, description="context limit in tokens")
    max_num_seqs: int = Field(64, ge=1, le=4096, description="max concurrent sequences")
    kv_cache_gib: float = Field(
        1.0, gt=0, le=1024, description="KV cache size (VLLM_CPU_KVCACHE_SPACE on CPU)"
    )
    enforce_eager: bool = Field(True, description="skip graph capture (start ~30 s on CPU)")
    enable_prefix_caching: bool = Field(True, description="continuation chunks reuse cached KV")
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1.0, description="GPU only")
    seed: int = Field(0, ge=0, description="engine RNG seed")
    start_timeout_s: float = Field(600.0, gt=0, le=7200, description="engine start deadline")
    fake_step_s: float = Field(
        0.001, ge=0, le=10, description="fake backend only: seconds per generated token"
    )
