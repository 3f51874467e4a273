"""Benchmarks of the service itself, each a command that prints its figures: the real Ray Serve
app on this machine (``service``: ``seer compare``, ``seer e2e``), the engines
(``speculation_methods``: speculation methods on one vLLM engine; ``sim_engine_cpu``: the CPU
cost of sim engines; ``exactness_power``: the power of ``seer exactness``) and the history store
(``store_writer``: writer throughput and outages). Benchmarks of the algorithms alone live in
the top-level ``bench``; the dashboard's refresh cost in ``dashboard.refresh_bench``."""
