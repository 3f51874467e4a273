"""``checkpoint_digest``: equal for equal tensors however they are split into files, different
for one changed byte, and a partial or foreign file is an error naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from app.weights_digest import checkpoint_digest

TENSORS = {
    "a.weight": torch.arange(12, dtype=torch.float32).reshape(3, 4),
    "b.bias": torch.ones(5, dtype=torch.bfloat16),
    "c": torch.tensor([7], dtype=torch.int64),
}


def _save(d: Path, files: list[list[str]], tensors: dict[str, torch.Tensor] = TENSORS) -> Path:
    d.mkdir()
    for k, names in enumerate(files):
        save_file({n: tensors[n] for n in names}, d / f"model-{k}.safetensors")
    return d


def test_the_digest_is_of_the_tensors_not_of_the_files(tmp_path: Path) -> None:
    one = _save(tmp_path / "one", [["a.weight", "b.bias", "c"]])
    two = _save(tmp_path / "two", [["c", "a.weight"], ["b.bias"]])
    assert checkpoint_digest(one) == checkpoint_digest(two)
    assert len(checkpoint_digest(one)) == 64


def test_one_changed_value_dtype_or_name_changes_it(tmp_path: Path) -> None:
    base = checkpoint_digest(_save(tmp_path / "base", [list(TENSORS)]))
    changed = dict(TENSORS, c=torch.tensor([8], dtype=torch.int64))
    as_int32 = dict(TENSORS, c=torch.tensor([7], dtype=torch.int32))
    renamed = {("d" if k == "c" else k): v for k, v in TENSORS.items()}
    for i, t in enumerate((changed, as_int32, renamed)):
        d = _save(tmp_path / f"v{i}", [list(t)], t)
        assert checkpoint_digest(d) != base


def test_a_partial_write_or_a_foreign_file_is_an_error(tmp_path: Path) -> None:
    d = _save(tmp_path / "cut", [list(TENSORS)])
    f = d / "model-0.safetensors"
    f.write_bytes(f.read_bytes()[:-3])
    with pytest.raises(ValueError, match="cut short"):
        checkpoint_digest(d)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "x.safetensors").write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{oops")
    with pytest.raises(ValueError, match="x.safetensors: not a safetensors file"):
        checkpoint_digest(tmp_path / "junk")


def test_a_directory_without_config_or_weights_is_not_a_checkpoint(tmp_path: Path) -> None:
    from app.weights_digest import checkpoint_problem
    from tests.app.serve.fakes import checkpoint

    assert checkpoint_problem(checkpoint(tmp_path / "ok")) is None
    (tmp_path / "empty").mkdir()
    problem = checkpoint_problem(tmp_path / "empty")
    assert problem is not None and "lacks config.json and *.safetensors weight files" in problem
    (tmp_path / "nested" / "sub").mkdir(parents=True)  # weights only below: still none here
    (tmp_path / "nested" / "config.json").write_text("{}")
    checkpoint(tmp_path / "nested" / "sub")
    assert "lacks *.safetensors" in (checkpoint_problem(tmp_path / "nested") or "")


def test_a_verified_copy_is_what_was_checked_whatever_the_source_does_after(
    tmp_path: Path,
) -> None:
    """Issue 38, defect 3: the digest was taken, then the load read the files again, so a
    file changed in between went unnoticed. The vLLM worker now verifies a private copy and
    loads from it (``verified_copy``): a change to the source after the check reaches nothing
    that is loaded, and a copy of other bytes than the trainer's digest is refused."""
    from app.weights_digest import DigestMismatch, verified_copy

    src = _save(tmp_path / "src", [["a.weight", "b.bias"], ["c"]])
    want = checkpoint_digest(src)
    private = tmp_path / "private"
    private.mkdir()
    assert verified_copy(src, want, private) == want
    save_file({"c": torch.tensor([9])}, src / "model-1.safetensors")  # changed after the check
    assert checkpoint_digest(src) != want and checkpoint_digest(private) == want
    again = tmp_path / "again"
    again.mkdir()
    with pytest.raises(DigestMismatch) as err:
        verified_copy(src, want, again)
    assert err.value.read == checkpoint_digest(src) and err.value.expected == want
    assert "nothing loaded" in str(err.value)
