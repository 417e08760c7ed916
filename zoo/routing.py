"""Routing as a workload fact (issue 38): how a mixture-of-experts layer spreads its tokens.

A router of random weights routes almost uniformly; a trained one does not. The workload's
``routing_skew`` (``s >= 0``) emulates the imbalance: each token's ``k`` experts are drawn without
replacement from a Zipf prior over the experts, ``p_e`` proportional to ``(e + 1)^-s`` (expert 0
the most popular), as the top ``k`` of ``log p_e + Gumbel noise`` (Plackett-Luce sampling:
``zoo.experts`` draws it on the device each step, after the router's GEMM, which still runs).
``s = 0`` is the router as built. Torch-free: the counts and the predictor use it.

- ``inclusion(E, k, s)``: the probability that a token routes to each expert (``k / E`` each at
  ``s = 0``; by Monte Carlo of the same sampling otherwise, seeded and cached);
- ``expected_touched(E, k, tokens, s)``: the distinct experts a step of ``tokens`` reaches,
  ``sum_e 1 - (1 - q_e)^tokens`` (tokens independent): the experts whose weights a decode step
  reads;
- ``load_max_over_mean(E, k, s)``: the busiest expert's tokens over the mean's in a long prefill,
  ``E max_e q_e / k`` (1 when uniform);
- ``expected_blocks(E, k, tokens, block_m, s)``: the blocks of ``block_m`` rows the grouped GEMMs
  run over, ``sum_e E[ceil(X_e / block_m)]`` with ``X_e ~ Binomial(tokens, q_e)`` the rows of
  expert ``e`` (``kernels.moe_gemm.align`` pads each expert's rows to whole blocks; each block
  streams its expert's weights and runs ``block_m`` rows through them).
"""

from __future__ import annotations

import heapq
import math
import random
from functools import lru_cache

SAMPLES = 4000  # Monte Carlo draws of one token's k experts


def zipf_prior(n_experts: int, skew: float) -> list[float]:
    """``p_e`` proportional to ``(e + 1)^-skew`` over ``n_experts`` experts, summing to 1."""
    w = [(e + 1) ** -skew for e in range(n_experts)]
    total = sum(w)
    return [x / total for x in w]


@lru_cache(maxsize=256)
def inclusion(n_experts: int, k: int, skew: float) -> tuple[float, ...]:
    """``q_e``: the probability that one token's ``k`` experts include expert ``e`` under
    ``routing_skew`` ``skew`` (module doc); they sum to ``k``.

    Raises:
        ValueError: ``skew < 0`` or ``k`` not in ``1 .. n_experts``.
    """
    if skew < 0:
        raise ValueError(f"routing_skew must be >= 0, got {skew}")
    if not 1 <= k <= n_experts:
        raise ValueError(f"top-k {k} must be in 1 .. {n_experts}")
    if skew == 0:
        return (k / n_experts,) * n_experts
    logp = [math.log(p) for p in zipf_prior(n_experts, skew)]
    rng = random.Random(0)
    hits = [0] * n_experts
    for _ in range(SAMPLES):
        keys = [lp - math.log(-math.log(rng.random() or 1e-300)) for lp in logp]
        for e in heapq.nlargest(k, range(n_experts), key=keys.__getitem__):
            hits[e] += 1
    return tuple(h / SAMPLES for h in hits)


def expected_touched(n_experts: int, k: int, tokens: int, skew: float = 0.0) -> float:
    """Expected number of distinct experts ``tokens`` tokens route to, each picking ``k`` of
    ``n_experts`` (module doc): ``E (1 - (1 - k/E)^N)`` when uniform. The bytes of a decode step's
    experts follow it."""
    if tokens <= 0:
        return 0.0
    if skew == 0:
        return n_experts * (1.0 - (1.0 - k / n_experts) ** tokens)
    return sum(1.0 - (1.0 - q) ** tokens for q in inclusion(n_experts, k, skew))


def load_max_over_mean(n_experts: int, k: int, skew: float = 0.0) -> float:
    """The busiest expert's share of a long prefill's tokens over the mean expert's:
    ``E max_e q_e / k`` (1 when uniform)."""
    return n_experts * max(inclusion(n_experts, k, skew)) / k


def expected_blocks(n_experts: int, k: int, tokens: int, block_m: int, skew: float = 0.0) -> float:
    """The expected blocks of ``block_m`` rows over the experts of a step of ``tokens`` tokens
    (module doc): ``sum_e E[ceil(X_e / block_m)]``, ``X_e ~ Binomial(tokens, q_e)``
    (``inclusion``). Exact over the binomial's mass where its variance is at most 400 rows,
    else by its normal approximation (continuity-corrected); 0 for no tokens."""
    if tokens <= 0:
        return 0.0
    counts: dict[float, int] = {}
    for q in inclusion(n_experts, k, skew):
        counts[q] = counts.get(q, 0) + 1
    return sum(n * _blocks_of(int(tokens), q, int(block_m)) for q, n in counts.items())


@lru_cache(maxsize=4096)
def _blocks_of(n: int, q: float, b: int) -> float:
    """``E[ceil(X / b)]`` for ``X ~ Binomial(n, q)``: ``sum_{j >= 0} P(X > j b)``."""
    if q <= 0.0:
        return 0.0
    if q >= 1.0:
        return float(-(-n // b))
    mu, var = n * q, n * q * (1.0 - q)
    hi = min(n, int(mu + 12.0 * math.sqrt(var) + 1))
    if var > 400.0:  # P(X > x) by the normal law, x + 0.5 for the continuity
        sd = math.sqrt(var)
        return sum(0.5 * math.erfc((j * b + 0.5 - mu) / (sd * math.sqrt(2.0)))
                   for j in range(0, hi // b + 1))
    lq, l1q = math.log(q), math.log1p(-q)
    lg = math.lgamma(n + 1)
    return sum(math.exp(lg - math.lgamma(x + 1) - math.lgamma(n - x + 1) + x * lq + (n - x) * l1q)
               * -(-x // b) for x in range(1, hi + 1))
