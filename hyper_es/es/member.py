"""An ES candidate: θ + scale·ε(seed); what the ES strategy asks and a resident engine installs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Member:
    seed: int
    scale: float  # ±σ (the mirror of an antithetic pair has −σ)
