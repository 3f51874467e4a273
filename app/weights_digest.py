"""A checkpoint directory: what it must hold (``checkpoint_problem``), and its digest, what a
trainer and every engine replica compute of the same directory of ``*.safetensors`` files, so an
update can be verified where it is loaded.

A checkpoint is a Hugging Face model folder: ``config.json`` and at least one ``*.safetensors``
file of weights, beside each other (not in subdirectories).

Definition (stable, dependency-free: no torch, readable by a trainer process): for every tensor
of every ``*.safetensors`` file in the directory (not its subdirectories), sha256 of its name,
dtype, shape and raw bytes; the digest is sha256 over those, in tensor-name order, as hex. So it
does not depend on how tensors are split into files, and two checkpoints with equal tensors have
equal digests. A file that is not valid safetensors raises ``ValueError`` naming it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path

_CHUNK = 1 << 24  # bytes hashed per read


#: the model config every checkpoint holds beside its weight files
CONFIG_FILE = "config.json"


def checkpoint_problem(path: str | Path) -> str | None:
    """What keeps the directory ``path`` from being a checkpoint (``None``: nothing), naming
    what is missing; reads names, never the weights."""
    p = Path(path)
    missing = []
    if not (p / CONFIG_FILE).is_file():
        missing.append(CONFIG_FILE)
    if not any(f.is_file() for f in p.glob("*.safetensors")):
        missing.append("*.safetensors weight files")
    if not missing:
        return None
    return f"weights path {str(path)!r} is not a checkpoint: it lacks {' and '.join(missing)}"


def checkpoint_digest(path: str | Path) -> str:
    tensors: dict[str, str] = {}
    for f in sorted(Path(path).glob("*.safetensors")):
        for name, digest in _tensor_digests(f).items():
            if name in tensors:
                raise ValueError(f"{f}: tensor {name!r} is in two files of {path}")
            tensors[name] = digest
    total = hashlib.sha256()
    for name in sorted(tensors):
        total.update(f"{name}\0{tensors[name]}\n".encode())
    return total.hexdigest()


class DigestMismatch(ValueError):
    """The checkpoint at ``path`` was read with digest ``read``, not the ``expected`` one the
    trainer gave: nothing was loaded (a partial write, or another checkpoint). Picklable with
    its fields, so it crosses Ray and names what each replica read."""

    def __init__(self, path: str, read: str, expected: str) -> None:
        super().__init__(
            f"weights at {path!r} have digest {read}, not the expected {expected} "
            "(a partial write, or another checkpoint?); nothing loaded"
        )
        self.path = path
        self.read = read
        self.expected = expected

    def __reduce__(self) -> tuple[type[DigestMismatch], tuple[str, str, str]]:
        return (DigestMismatch, (self.path, self.read, self.expected))


def verified_copy(path: str | Path, expected: str | None, into: str | Path) -> str:
    """Copy the ``*.safetensors`` files of ``path`` into the private directory ``into`` and
    return the digest of the copy (``DigestMismatch`` when ``expected`` is another): what a
    replica loads from ``into`` afterwards is exactly what was verified, whatever happens to
    ``path`` meanwhile (a digest taken before the load reads the files again would miss a file
    changed in between)."""
    out = Path(into)
    for f in sorted(Path(path).glob("*.safetensors")):
        shutil.copyfile(f, out / f.name)
    digest = checkpoint_digest(out)
    if expected is not None and digest != expected:
        raise DigestMismatch(str(path), digest, expected)
    return digest


def verified_digest(path: str | Path, expected: str | None) -> str:
    """``path``'s digest; with ``expected``, ``DigestMismatch`` unless it is that one (the
    caller then loads nothing)."""
    digest = checkpoint_digest(path)
    if expected is not None and digest != expected:
        raise DigestMismatch(str(path), digest, expected)
    return digest


def _tensor_digests(f: Path) -> dict[str, str]:
    with f.open("rb") as fh:
        head = fh.read(8)
        if len(head) != 8:
            raise ValueError(f"{f}: not a safetensors file (shorter than its header length)")
        (n,) = struct.unpack("<Q", head)
        if n > 100 * 2**20:
            raise ValueError(f"{f}: not a safetensors file (header of {n} bytes)")
        try:
            header = json.loads(fh.read(n))
        except ValueError as exc:
            raise ValueError(f"{f}: not a safetensors file ({exc})") from None
        base = 8 + n
        out: dict[str, str] = {}
        for name, info in sorted(header.items()):
            if name == "__metadata__":
                continue
            start, end = (int(x) for x in info["data_offsets"])
            h = hashlib.sha256(f"{name}\0{info['dtype']}\0{info['shape']}\0".encode())
            fh.seek(base + start)
            left = end - start
            while left > 0:
                block = fh.read(min(_CHUNK, left))
                if not block:
                    raise ValueError(f"{f}: tensor {name!r} is cut short (a partial write?)")
                h.update(block)
                left -= len(block)
            out[name] = h.hexdigest()
        return out
