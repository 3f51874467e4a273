"""Engine replica configuration (crosses Ray and YAML, so pydantic with documented bounds)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from core.drafting.step_drafter import DraftSettings
from core.engine.types import LogprobsMode

#: Table 3 presets of ``core.sim.workload.PRESETS`` (listed here so configs validate without
#: importing numpy; tests/app/engines/test_sim_engine.py checks the two lists agree).
SIM_PRESETS = ("moonlight", "qwen2-vl", "kimi-k2")
#: Cost models by name (``core.sim.workload.get_cost``): the presets' and ``vllm-cpu``.
SIM_COSTS = (*SIM_PRESETS, "vllm-cpu")


class SimConfig(BaseModel):
    """The ``sim`` backend: one paper-scale instance (``core.sim`` cost model) in wall time.

    The workload is the one ``seer simulate --workload W --scale S --seed N`` draws, so a
    client can send exactly it (``app.engines.sim.workload.group_prompt``) and compare."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    workload: str = Field(
        "qwen2-vl",
        description="lengths and tokens: a Table 3 preset (moonlight | qwen2-vl | kimi-k2) or "
        "replay:FILE (recorded rollouts, .jsonl or .jsonl.gz; tokens replayed)",
    )
    cost: str | None = Field(
        None,
        description="cost model (step time, KV capacity) of the instance: a preset's or vllm-cpu "
        "(core.sim.workload.get_cost, as seer simulate --cost); None = the workload's preset "
        "(qwen2-vl for replay:FILE, like seer simulate). One replica is one engine holding its "
        "instance's whole KV (a cost model with data-parallel ranks, kimi-k2's 32, is pooled "
        "into one, as seer simulate --ranks 1). Sequences decoded at once: "
        "engine.max_num_seqs (the presets' instances run 256, kimi-k2 1024)",
    )
    scale: float = Field(
        1.0, gt=0, le=100, description="presets: multiply the groups by this, (0, 100]"
    )
    seed: int = Field(0, ge=0, le=2**63 - 1, description="seed of the drawn lengths and tokens")
    time_scale: float = Field(
        0.01,
        ge=1e-6,
        le=100.0,
        description="wall seconds per virtual second, [1e-6, 100]: 0.01 runs a 40 ms "
        "paper-scale step in 0.4 ms; below ~1e-4 the event loop, not the model, sets the pace",
    )
    epoch: int = Field(
        0,
        ge=0,
        le=2**31 - 1,
        description="RL iteration of the same prompts whose responses the engine serves: 0 = "
        "the drawn workload; e >= 1 keeps every prompt's latent length and draws fresh responses "
        "around it (core.sim.workload.epoch_workload), so a prompt's lengths differ across "
        "iterations but stay correlated. Presets only (not replay:FILE)",
    )
    vocab_size: int = Field(
        65_536,
        ge=512,
        le=16_777_216,
        description="token ids lie in [0, vocab_size), 512..2^24; must exceed recorded ids",
    )

    @field_validator("workload")
    @classmethod
    def _known_workload(cls, v: str) -> str:
        if v.startswith("replay:"):
            path = Path(v[len("replay:") :])
            if not path.is_file():
                raise ValueError(f"workload {v!r}: no recorded rollouts file {str(path)!r}")
            return v
        if v not in SIM_PRESETS:
            raise ValueError(
                f"unknown workload {v!r}; valid: {', '.join(SIM_PRESETS)} or replay:FILE"
            )
        return v

    @model_validator(mode="after")
    def _epoch_needs_a_preset(self) -> SimConfig:
        if self.epoch and self.workload.startswith("replay:"):
            raise ValueError(
                f"sim.epoch={self.epoch}: recorded rollouts ({self.workload}) have no latent "
                "lengths to draw another iteration from; use a preset workload"
            )
        return self

    @field_validator("cost")
    @classmethod
    def _known_cost(cls, v: str | None) -> str | None:
        if v is not None and v not in SIM_COSTS:
            raise ValueError(f"unknown cost model {v!r}; valid: {', '.join(SIM_COSTS)}")
        return v


#: Speculation methods of the vLLM backend: ``grouped`` (the Seer drafter, fed by the group's
#: siblings), vLLM's own prompt-lookup ``ngram`` (a baseline), or ``none``.
SPECULATION_METHODS = ("none", "grouped", "ngram")


class SpeculationConfig(BaseModel):
    """Speculative decoding of one vLLM replica. The method and K are fixed at engine start;
    ``settings`` (grouped only) change live through ``configure_speculation``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: Literal["none", "grouped", "ngram"] = Field(
        "grouped",
        description="grouped (Seer's group drafter) | ngram (vLLM prompt lookup) | none. With "
        "grouped, only chunks of a speculating policy (seer) draft; the others run as with none",
    )
    num_speculative_tokens: int = Field(
        8, ge=1, le=16, description="K, the most draft tokens per request and step, 1..16"
    )
    settings: DraftSettings = Field(
        default_factory=DraftSettings,
        description="grouped drafting: enabled, max_draft (<= K), min_token_prob, adaptive, "
        "probe_priority; changeable live",
    )


class EngineConfig(BaseModel):
    """How to start one engine replica."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: str = Field("vllm", description="engine registry name: vllm | fake | sim")
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
    cpu_threads: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="CPU only: compute threads of the engine, 1..1024, not pinned to cores. "
        "null = vLLM's own binding: one thread pinned to every core of the NUMA node, right for "
        "one replica per machine; with several replicas on one machine give each its share of "
        "the cores (2 replicas on a 2-core machine: 1), or their pinned threads fight over the "
        "same cores (measured 2-20x slower steps: lab/NOTES.md)",
    )
    enforce_eager: bool = Field(True, description="skip graph capture (start ~30 s on CPU)")
    enable_prefix_caching: bool = Field(True, description="continuation chunks reuse cached KV")
    gpu_memory_utilization: float = Field(
        0.85,
        gt=0,
        le=1.0,
        description="GPU only: fraction of each GPU's memory vLLM may take (weights + KV), (0, 1]; "
        "at most the service's gpus_per_replica when that is a fraction (replicas share a GPU)",
    )
    tensor_parallel_size: int = Field(
        1,
        ge=1,
        le=64,
        description="GPUs one engine's model is split over (vLLM tensor_parallel_size), 1..64; "
        "above 1 the service's gpus_per_replica must equal it",
    )
    executor: Literal["mp", "ray"] = Field(
        "mp",
        description="how vLLM runs its tensor-parallel workers (distributed_executor_backend; "
        "ignored at tensor_parallel_size 1, where the engine runs in the replica): mp = "
        "processes of the replica, which holds every GPU of its engine (one node); ray = Ray "
        "actors, one per GPU bundle of the replica's placement group (Ray Serve LLM's layout; "
        "spans nodes under placement_strategy PACK)",
    )
    logprobs_mode: LogprobsMode = Field(
        "raw",
        description="which logprobs responses carry (fixed at engine start): raw = the model's "
        "untempered log-softmax of each sampled token (vLLM raw_logprobs); processed = its "
        "log-probability under the distribution it was sampled from, after temperature, top_k "
        "and top_p (vLLM processed_logprobs). Equal at T=1 without top_k/top_p",
    )
    seed: int = Field(0, ge=0, description="engine RNG seed")
    start_timeout_s: float = Field(600.0, gt=0, le=7200, description="engine start deadline")
    fake_step_s: float = Field(
        0.001, ge=0, le=10, description="fake backend only: seconds per generated token"
    )
    speculation: SpeculationConfig = Field(
        default_factory=SpeculationConfig, description="vllm backend only: speculative decoding"
    )
    sim: SimConfig | None = Field(
        None, description="backend sim only (None = SimConfig defaults); model is then ignored"
    )
