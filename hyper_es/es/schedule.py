"""σ schedules for full-parameter ES: constant, linear decay, or cosine decay after a linear warm-up."""

from __future__ import annotations

import math


def sigma_at(t: int, total: int, sigma: float, *, kind: str = "constant", sigma_min: float = 0.0,
             warmup: int = 0) -> float:
    """σ at iteration t (0-based) of `total`. Warm-up ramps linearly from sigma_min to sigma over `warmup`
    iterations; then `linear` and `cosine` decay from sigma to sigma_min at the last iteration."""
    if kind not in ("constant", "linear", "cosine"):
        raise ValueError(f"unknown sigma schedule '{kind}' (expected constant, linear or cosine)")
    if t < warmup:
        return sigma_min + (sigma - sigma_min) * (t + 1) / (warmup + 1)
    if kind == "constant":
        return sigma
    span = max(total - 1 - warmup, 1)
    frac = min(max((t - warmup) / span, 0.0), 1.0)
    if kind == "linear":
        return sigma + (sigma_min - sigma) * frac
    return sigma_min + 0.5 * (sigma - sigma_min) * (1.0 + math.cos(math.pi * frac))
