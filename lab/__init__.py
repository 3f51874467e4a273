"""The laboratory: calibration fits, benchmarks, experiments and the proofs' deliberate faults.

Invariant: ``lab`` may import ``core``, ``app`` and ``dashboard``; none of them ever imports
``lab`` (``tests/test_layers.py``). What a user of the service runs lives in the product; what
measures, calibrates or breaks it on purpose lives here, behind the ``seer-lab`` command.
Dated findings go to ``lab/NOTES.md`` (append-only), never into the product's docs.

- ``calibration``: the simulator's fits to the paper (``joint``, ``step_fit``, ``calibrate``),
  the Table-4-shaped check (``table4``), the epochs experiment (``epochs``), their search
- ``bench``: benchmarks, each a command that prints its figures (``python -m lab.bench.NAME``)
- ``commands``: the ``seer-lab`` sub-commands (``e2e``, ``sim-vs-real``, ``compare``,
  ``replay``, ``exactness``); ``cli``: the entry point
- ``engines``: the deliberately broken verification rules behind a lab worker extension
"""
