"""The ``seer`` command line. Sub-commands live in ``app.commands``; heavy imports stay lazy."""

from __future__ import annotations

import typer

from app.commands import db, demo, e2e, exactness, models, replay, serve, simulate

cli = typer.Typer(
    name="seer",
    help="Seer rollout service: fast grouped rollouts for synchronous LLM RL.",
    no_args_is_help=True,
    add_completion=False,
)


@cli.callback()
def _root() -> None:
    """Seer rollout service: fast grouped rollouts for synchronous LLM RL."""


models.register(cli)
simulate.register(cli)
serve.register(cli)
demo.register(cli)
replay.register(cli)
e2e.register(cli)
exactness.register(cli)
db.register(cli)


def main() -> None:
    from app.env import DRIVER_ENV, apply

    apply(DRIVER_ENV)  # before any command imports Ray or transformers
    cli()
