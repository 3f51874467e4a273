"""Grouped speculative drafting (the paper's third technique), as a pure library.

- ``automaton``: generalized suffix automaton with occurrence counts (the per-group structure)
- ``speculate``: single-path / top-W tree drafts from it; ``draft``: the ``Draft`` tree type
- ``group`` / ``store``: one group's index and the register / add / speculate / release
  lifecycle with incremental export/import (what the draft server and replicas run)
- ``adaptive`` / ``acceptance``: draft-length policy and online acceptance estimate
- ``recorded``: recorded group rollouts (the format of ``data/rollouts``); the drafting
  methods the replay benchmark compares live in the laboratory (``lab.bench.draft_methods``)
"""

from core.drafting.acceptance import AcceptanceEstimator
from core.drafting.adaptive import (
    AdaptiveDraftConfig,
    DraftCandidate,
    choose_draft_lengths,
    expected_time_per_token,
)
from core.drafting.draft import Draft
from core.drafting.group import DraftLifecycleError, GroupIndex, GroupMemory
from core.drafting.speculate import SpeculationParams
from core.drafting.store import DraftStore, GroupDelta, TokenRun

__all__ = [
    "AcceptanceEstimator",
    "AdaptiveDraftConfig",
    "Draft",
    "DraftCandidate",
    "DraftLifecycleError",
    "DraftStore",
    "GroupDelta",
    "GroupIndex",
    "GroupMemory",
    "SpeculationParams",
    "TokenRun",
    "choose_draft_lengths",
    "expected_time_per_token",
]
