"""Benchmarks of the algorithms alone (imports ``core`` only, never ``app``): each module is a
command that prints its figures (``python -m bench.<module>``). The service's own benchmarks
(a real Ray Serve app, vLLM engines, the store) live in ``app.bench``.

- ``sim_scaling``: the simulator's own run time as the workload grows
- ``scheduler_dispatch``: the scheduler's dispatch decisions per second, and over a long run
- ``draft_replay``: the replay protocols (lockstep, references) of drafting methods on recorded
  group rollouts, and the drafter's speed
- ``draft_acceptance``: acceptance length per (method, k) over a whole recorded file
  (``seer replay``)
"""
