"""Benchmarks of the service itself (real Ray Serve app on this machine): ``seer compare``,
``seer e2e``. Benchmarks of the algorithms alone live in the top-level ``bench``."""
