"""Sub-commands of the ``seer`` CLI, one module per concern; each exposes ``register(cli)``."""
