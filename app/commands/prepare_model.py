"""``seer prepare-model``: build the cached model folders vLLM loads offline."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def prepare_model(
    models: Annotated[
        str, typer.Option(help="comma-separated: smollm2-135m-instruct, tiny-llama")
    ] = "smollm2-135m-instruct, tiny-llama",
    cache_dir: Annotated[
        Path | None,
        typer.Option(help="cache folder (default: $SEER_CACHE_DIR or ~/.cache/seer)"),
    ] = None,
    force: Annotated[bool, typer.Option(help="rebuild even if the cache looks complete")] = False,
) -> None:
    """Convert SmolLM2-135M-Instruct from the PyPI GGUF to safetensors and build the tiny test
    model, once; later runs only verify the cache and print the folders."""
    from app.model_cache import ModelPrepError, prepare

    names = [m.strip() for m in models.split(",") if m.strip()]
    try:
        for name in names:
            path = prepare(name, cache_dir, force=force, say=lambda s: typer.echo(s, err=True))
            typer.echo(f"{name}: {path}")
    except (ModelPrepError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def register(cli: typer.Typer) -> None:
    cli.command("prepare-model")(prepare_model)
