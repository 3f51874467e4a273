"""The ``seer-lab`` command line: the laboratory's benchmarks and proofs (heavy imports lazy).

The product's ``seer`` keeps what a user of the service runs; a command that moved here, run as
``seer NAME``, says so (``app.cli.MOVED_TO_LAB`` lists them).
"""

from __future__ import annotations

from app.commands.help import SeerTyper
from lab.commands import compare, e2e, exactness, replay, sim_vs_real

HELP = """The laboratory of the Seer rollout service: benchmarks that measure the service and
its simulator, and the proofs that break it on purpose. `seer-lab COMMAND --help` documents
each one; the service itself is run with `seer`."""

cli = SeerTyper(
    name="seer-lab",
    help=HELP,
    no_args_is_help=True,
    add_completion=False,
)


@cli.callback()
def _root() -> None:
    """The ``seer-lab`` command group (its help is ``HELP``)."""


replay.register(cli)
e2e.register(cli)
compare.register(cli)
sim_vs_real.register(cli)
exactness.register(cli)


def main() -> None:
    from app.env import DRIVER_ENV, apply

    apply(DRIVER_ENV)  # before any command imports Ray or transformers
    cli()
