"""The ``seer`` command line. Sub-commands live in ``app.commands``; heavy imports stay lazy."""

from __future__ import annotations

from app.commands import (
    compare,
    db,
    demo,
    e2e,
    exactness,
    models,
    replay,
    serve,
    sim_vs_real,
    simulate,
)
from app.commands.help import SeerTyper

HELP = """Seer rollout service for RL training: a trainer sends a batch of prompts and gets
back, for every prompt, a group of sampled responses (text, token ids, logprobs), over HTTP.

Start it with `seer serve` (what ./run.sh does), try it with `seer demo`; the other commands
are benchmarks and maintenance. `seer COMMAND --help` documents each one."""

cli = SeerTyper(
    name="seer",
    help=HELP,
    no_args_is_help=True,
    add_completion=False,
)


@cli.callback()
def _root() -> None:
    """The ``seer`` command group (its help is ``HELP``)."""


models.register(cli)
simulate.register(cli)
serve.register(cli)
demo.register(cli)
replay.register(cli)
e2e.register(cli)
compare.register(cli)
exactness.register(cli)
db.register(cli)
sim_vs_real.register(cli)


def main() -> None:
    from app.env import DRIVER_ENV, apply

    apply(DRIVER_ENV)  # before any command imports Ray or transformers
    cli()
