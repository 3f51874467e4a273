"""The Tuning page: the speculation settings the service runs, what an edit changes, and the
audit log of changes recorded in the store."""

from __future__ import annotations

from typing import Any

from app.api import SpeculationState
from app.store.views import ConfigVersion
from dashboard.views.common import when

#: The editable settings in display order, with their bounds (as the service checks them).
FIELDS: dict[str, str] = {
    "enabled": "speculate at all",
    "adaptive": "choose draft lengths per step from measured cost and acceptance",
    "max_draft": "draft tokens per request and step, 1..64 (capped by the engine's K)",
    "min_token_prob": "stop a draft path below this probability, [0, 1]",
    "probe_priority": "weight of probe requests' tokens in the choice, >= 1",
}


def settings_rows(state: SpeculationState) -> list[dict[str, object]]:
    return [
        {"setting": k, "value": str(state.settings.get(k)), "meaning": FIELDS.get(k, "")}
        for k in [*FIELDS, *sorted(set(state.settings) - set(FIELDS))]
        if k in state.settings
    ]


def replica_rows(state: SpeculationState) -> list[dict[str, object]]:
    return [
        {
            "replica": r.replica_id,
            "runs version": r.version,
            "current": r.version == state.version,
            "error": r.error or "",
        }
        for r in state.replicas
    ]


def changed(current: dict[str, Any], edited: dict[str, Any]) -> dict[str, Any]:
    """The settings ``edited`` sets to a value other than ``current``'s (the PUT body merges
    them over the service's settings, so a concurrent change to another field survives)."""
    out = {}
    for k, v in edited.items():
        cur = current.get(k)
        same = cur == v and type(cur) is type(v)
        if isinstance(cur, float) and isinstance(v, float):
            same = abs(cur - v) <= 1e-12
        if not same:
            out[k] = v
    return out


def audit_rows(versions: list[ConfigVersion]) -> list[dict[str, object]]:
    return [
        {
            "when": when(v.at).strftime("%Y-%m-%d %H:%M:%S"),
            "who": v.who,
            "changes": ", ".join(f"{k}: {a} → {b}" for k, (a, b) in v.changes().items())
            or "(none)",
            "reason": v.reason or "",
        }
        for v in versions
    ]
