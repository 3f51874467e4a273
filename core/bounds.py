"""One check for the documented bounds of every core config field.

``check_range`` raises ``ValueError("name=value outside [lo, hi]")``, so every config error
names the offending field and value the same way; a missing bound is open (``inf``).
"""

from __future__ import annotations

import math


def check_range(
    name: str,
    value: float,
    lo: float = -math.inf,
    hi: float = math.inf,
    *,
    lo_open: bool = False,
    hi_open: bool = False,
) -> None:
    """Raise ValueError unless lo <= value <= hi (strict where ``lo_open`` / ``hi_open``)."""
    above = value > lo if lo_open else value >= lo
    below = value < hi if hi_open else value <= hi
    if not (above and below):  # also rejects NaN
        left = "(" if lo_open else "["
        right = ")" if hi_open else "]"
        raise ValueError(f"{name}={value!r} outside {left}{_num(lo)}, {_num(hi)}{right}")


def _num(x: float) -> str:
    if math.isinf(x) or not float(x).is_integer():
        return str(x)
    return str(int(x))
