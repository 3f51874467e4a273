"""The ``seer`` command line. Sub-commands live in ``app.commands``; heavy imports stay lazy."""

from __future__ import annotations

from typing import Annotated

import typer

from app.commands import db, demo, exactness, prepare_model, serve, simulate
from app.commands.help import SeerTyper

#: commands that moved to the laboratory's ``seer-lab`` (issue 37); run as ``seer NAME`` they
#: say where they went
MOVED_TO_LAB = ("replay", "e2e", "compare", "sim-vs-real")

HELP = """Seer rollout service for RL training: a trainer sends a batch of prompts and gets
back, for every prompt, a group of sampled responses (text, token ids, logprobs), over HTTP.

Start it with `seer serve` (what ./run.sh does), try it with `seer demo`; the other commands
check and maintain it. `seer COMMAND --help` documents each one; the benchmarks are
`seer-lab`'s."""

cli = SeerTyper(
    name="seer",
    help=HELP,
    no_args_is_help=True,
    add_completion=False,
)


@cli.callback()
def _root() -> None:
    """The ``seer`` command group (its help is ``HELP``)."""


prepare_model.register(cli)
simulate.register(cli)
serve.register(cli)
demo.register(cli)
exactness.register(cli)
db.register(cli)


def _moved(name: str) -> None:
    def moved(args: Annotated[list[str] | None, typer.Argument(hidden=True)] = None) -> None:
        typer.echo(
            f"`seer {name}` moved to the laboratory: run `seer-lab {name}` "
            f"(`seer-lab {name} --help`)",
            err=True,
        )
        raise typer.Exit(2)

    cli.command(
        name,
        hidden=True,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )(moved)


for _name in MOVED_TO_LAB:
    _moved(_name)


def main() -> None:
    from app.env import DRIVER_ENV, apply

    apply(DRIVER_ENV)  # before any command imports Ray or transformers
    cli()
