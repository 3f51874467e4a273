"""The ``seer-lab`` sub-commands, one module per command (``register(cli)`` adds it)."""
