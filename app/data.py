"""Where the data a clone ships lives: the recorded rollouts, ``data/rollouts`` at the top of the
repository (format, provenance and statistics in its README). Tests, ``seer-lab replay``,
``--workload replay:``, ``lab.bench.speculation_methods`` and the README's examples read them
from here."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROLLOUTS = ROOT / "data" / "rollouts"
SMOLLM2_T1 = ROLLOUTS / "smollm2-public.jsonl.gz"  # T=1.0, 16 groups x 16
SMOLLM2_T07 = ROLLOUTS / "smollm2-t07-public.jsonl.gz"  # T=0.7
