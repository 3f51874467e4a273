"""Configuration of the divided-rollout scheduler (one frozen dataclass, bounds validated)."""

from __future__ import annotations

from dataclasses import dataclass

from core.bounds import check_range

#: Default chunk size in new tokens; chosen with the simulator (docs/scheduling.md, "Chunk size").
DEFAULT_CHUNK_TOKENS = 1024


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """How requests are ordered, cut into chunks and routed.

    Fields and bounds:
    - ``divided``: True = divided rollout (chunks, admission from KV reservations); False =
      the veRL baseline (whole groups round-robin to replicas up front, no chunking, the engine
      admits everything and may preempt).
    - ``ordering``: name in ``core.scheduling.ordering.ORDERINGS`` (``fifo``, ``breadth-first``,
      ``context``, ``context-hedge``, ``context-max``, ``oracle``, ``oracle-group``,
      ``oracle-cap``).
    - ``routing``: name in ``core.scheduling.routing.ROUTINGS`` (``least-loaded``,
      ``cache-aware``).
    - ``chunk_tokens`` (1 .. 1,048,576): most new tokens one chunk may generate.
    - ``cache_threshold`` (0 .. 100,000): cache-aware routing stays on the replica holding the
      request's KV unless its in-flight count exceeds the least-loaded replica's by more.
    - ``probes`` : one probe (speculative) request per group in a high-priority queue.
    - ``starvation_interval`` (0 .. 1,000,000): every n-th dispatch goes to the request that has
      waited longest (0 = never).
    - ``explore_interval`` (0 .. 1,000,000): every n-th dispatch goes to the not-yet-started
      request with the *shortest* estimate (0 = never): it frees its slot soon and exposes
      runaway responses of short-looking groups early.
    - ``within_sigma_prior`` (0.05 .. 3.0): prior std-dev of log length among siblings, for the
      ``context``/``context-hedge`` estimates until enough finished siblings are observed.
    - ``hedge_quantile`` (0.5 .. 0.999): the hedged estimate ranks a request by this quantile of its
      remaining length (0.5 = median); above 0.5 hedges toward long outcomes.
    - ``promote_fraction`` (0.0 .. 1.0): ``context`` runs a request first (longest first)
      while its hedged total length is at least this fraction of the cap; otherwise
      breadth-first (fewest generated tokens first).
    - ``prior_weight`` (0.0 .. 100.0): how many finished siblings one recorded length of the same
      prompt from an earlier iteration counts as.
    - ``rekey_every`` (1 .. 1,000,000): recompute every queued key after this many finished
      requests (population statistics drift).
    - ``rebalance_tokens`` (0 .. 1,048,576): a request that has generated at least this many
      tokens ignores the replica holding its KV and goes to the least-loaded replica that fits
      (its KV is pulled, ``migrate_tokens``), so long requests do not pile up on the replicas
      where they started (0 = never; then ``routing`` alone decides).
    """

    divided: bool = True
    ordering: str = "context"
    routing: str = "cache-aware"
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS
    cache_threshold: int = 32
    probes: bool = True
    starvation_interval: int = 0
    explore_interval: int = 0
    within_sigma_prior: float = 0.6
    hedge_quantile: float = 0.75
    promote_fraction: float = 0.95
    prior_weight: float = 0.5
    rekey_every: int = 256
    rebalance_tokens: int = 8192

    def __post_init__(self) -> None:
        from core.scheduling.ordering import ORDERINGS
        from core.scheduling.routing import ROUTINGS

        if self.ordering not in ORDERINGS:
            raise ValueError(f"unknown ordering {self.ordering!r}; valid: {sorted(ORDERINGS)}")
        if self.routing not in ROUTINGS:
            raise ValueError(f"unknown routing {self.routing!r}; valid: {sorted(ROUTINGS)}")
        check_range("chunk_tokens", self.chunk_tokens, 1, 1_048_576)
        check_range("cache_threshold", self.cache_threshold, 0, 100_000)
        check_range("starvation_interval", self.starvation_interval, 0, 1_000_000)
        check_range("explore_interval", self.explore_interval, 0, 1_000_000)
        check_range("within_sigma_prior", self.within_sigma_prior, 0.05, 3.0)
        check_range("hedge_quantile", self.hedge_quantile, 0.01, 0.999)
        check_range("promote_fraction", self.promote_fraction, 0.0, 1.0)
        check_range("prior_weight", self.prior_weight, 0.0, 100.0)
        check_range("rekey_every", self.rekey_every, 1, 1_000_000)
        check_range("rebalance_tokens", self.rebalance_tokens, 0, 1_048_576)
