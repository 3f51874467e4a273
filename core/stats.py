"""Statistics shared by core and the app: the two-sample tests of the exactness proof (chi-square
of categorical samples, Kolmogorov-Smirnov of real-valued ones; no scipy on these machines) and
the rollout tail time.

Invariant: ``chi2_sf(x, df)`` is the upper tail P(X >= x) of a chi-square variable with ``df``
degrees of freedom (the regularized upper incomplete gamma Q(df/2, x/2)), accurate to ~1e-12;
``two_sample_chi2`` tests whether two samples of tokens come from one distribution, pooling
categories whose expected count under the pooled distribution is below ``min_expected`` into
one "other" category so the test's chi-square approximation holds. ``two_sample_ks`` is the
asymptotic two-sample Kolmogorov-Smirnov test (ties counted once, so a shared atom adds no
distance). ``tail_time`` is the one definition of a rollout's tail (the simulator, the service's
metrics and the dashboard all use it).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

_EPS = 1e-15
_MAX_ITER = 10_000


def _gamma_p_series(a: float, x: float) -> float:
    term = total = 1.0 / a
    n = a
    for _ in range(_MAX_ITER):
        n += 1.0
        term *= x / n
        total += term
        if abs(term) < abs(total) * _EPS:
            break
    return total * math.exp(-x + a * math.log(x) - math.lgamma(a))


def _gamma_q_fraction(a: float, x: float) -> float:
    # Lentz's continued fraction for Q(a, x), x >= a + 1
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, _MAX_ITER):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            break
    return h * math.exp(-x + a * math.log(x) - math.lgamma(a))


def chi2_sf(x: float, df: int) -> float:
    """P(X >= x) for X ~ chi-square(df)."""
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    if math.isnan(x):
        raise ValueError("x is NaN")
    if x <= 0.0:
        return 1.0
    a, h = df / 2.0, x / 2.0
    if h < a + 1.0:
        return max(0.0, 1.0 - _gamma_p_series(a, h))
    return min(1.0, _gamma_q_fraction(a, h))


@dataclass(frozen=True, slots=True)
class ChiSquareResult:
    statistic: float
    df: int  # 0 when the samples fall into a single category (nothing to test: p = 1)
    p_value: float
    categories: int  # categories kept (the pooled "other" included)


def two_sample_chi2(
    a: Iterable[Hashable], b: Iterable[Hashable], min_expected: float = 5.0
) -> ChiSquareResult:
    """Chi-square test of homogeneity of two samples (2 x k contingency table)."""
    if not min_expected > 0:
        raise ValueError(f"min_expected must be > 0, got {min_expected}")
    ca, cb = Counter(a), Counter(b)
    na, nb = sum(ca.values()), sum(cb.values())
    if na == 0 or nb == 0:
        raise ValueError(f"both samples need values, got sizes {na} and {nb}")
    n = na + nb
    small = min(na, nb) / n
    rows: list[tuple[int, int]] = []
    other = [0, 0]
    for key in ca.keys() | cb.keys():
        x, y = ca.get(key, 0), cb.get(key, 0)
        if (x + y) * small >= min_expected:
            rows.append((x, y))
        else:
            other[0] += x
            other[1] += y
    if other[0] + other[1] > 0:
        rows.append((other[0], other[1]))
    if len(rows) < 2:
        return ChiSquareResult(0.0, 0, 1.0, len(rows))
    stat = 0.0
    for x, y in rows:
        tot = x + y
        ea, eb = tot * na / n, tot * nb / n
        stat += (x - ea) ** 2 / ea + (y - eb) ** 2 / eb
    df = len(rows) - 1
    return ChiSquareResult(stat, df, chi2_sf(stat, df), len(rows))


def _kolmogorov_sf(x: float) -> float:
    """P(K > x) of the Kolmogorov distribution (alternating series; 1 for small x)."""
    if x < 0.27:
        return 1.0
    total = sum((-1) ** (k - 1) * math.exp(-2.0 * k * k * x * x) for k in range(1, 101))
    return min(1.0, max(0.0, 2.0 * total))


def two_sample_ks(a: Iterable[float], b: Iterable[float]) -> float:
    """p-value of the two-sample Kolmogorov-Smirnov test that ``a`` and ``b`` come from one
    continuous distribution (the asymptotic distribution of sqrt(nm/(n+m)) D)."""
    xs, ys = sorted(a), sorted(b)
    n, m = len(xs), len(ys)
    if n == 0 or m == 0:
        raise ValueError(f"both samples need values, got sizes {n} and {m}")
    if any(math.isnan(v) for v in (*xs, *ys)):
        raise ValueError("a sample holds NaN")
    d = 0.0
    i = j = 0
    while i < n and j < m:
        v = min(xs[i], ys[j])
        while i < n and xs[i] == v:
            i += 1
        while j < m and ys[j] == v:
            j += 1
        d = max(d, abs(i / n - j / m))
    en = math.sqrt(n * m / (n + m))
    return _kolmogorov_sf(en * d)


def tail_time(finish_times: list[float]) -> float:
    """Time spent on the last 10% of requests to complete."""
    ts = sorted(finish_times)
    n = len(ts)
    k = max(0, math.ceil(0.9 * n) - 1)
    return ts[-1] - ts[k]
