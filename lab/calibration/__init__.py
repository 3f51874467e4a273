"""The simulator's calibration against the paper: fits, their search, and the checks of them.

Each module is a command (``python -m lab.calibration.NAME``); the constants they fit are
written into ``core.sim.workload.PRESETS`` and ``core.sim.cost`` by hand, each naming its fit.
"""
