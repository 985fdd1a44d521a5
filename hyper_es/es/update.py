"""Reward normalisation and the ES step, in place on named tensors.

Member i of an iteration is θ + sᵢσ·ε(seedᵢ), with sᵢ = +1, or −1 for the mirror of an antithetic pair. The step
is θ ← θ + α/(Nσ)·Σᵢ zᵢ·sᵢ·ε(seedᵢ), where z are the normalised rewards. Everything a step needs is (seeds, signs,
z, σ, α): stored per iteration, it rebuilds any iteration's weights by replay, in the same order of operations, so
bitwise the same."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from hyper_es.es.noise import check_kind, noise, noise_into, noise_table, pooled, windows


def normalise(rewards: Sequence[float], kind: str = "zscore") -> np.ndarray:
    """z-score (mean 0, std 1; all equal → zeros), centred rank (ranks mapped onto [−0.5, 0.5], ties averaged),
    or none (the raw rewards)."""
    r = np.asarray(rewards, dtype=np.float64)
    if kind == "none":
        return r
    if kind == "zscore":
        std = r.std()
        return np.zeros_like(r) if std == 0 else (r - r.mean()) / std
    if kind == "centred_rank":
        if r.size == 1:
            return np.zeros(1)
        order = r.argsort(kind="stable")
        ranks = np.empty_like(r)
        ranks[order] = np.arange(r.size, dtype=np.float64)
        for v in np.unique(r):  # ties share their mean rank
            ranks[r == v] = ranks[r == v].mean()
        return ranks / (r.size - 1) - 0.5
    raise ValueError(f"unknown reward normalisation '{kind}' (expected zscore, centred_rank or none)")


def signs(population: int, antithetic: bool) -> list[int]:
    return [1 if i % 2 == 0 else -1 for i in range(population)] if antithetic else [1] * population


@torch.no_grad()
def perturb(params: Mapping[str, torch.Tensor], seed: int, scale: float, kind: str = "generator") -> None:
    """θ += scale·ε(seed) for every tensor, in place. Undoing it with −scale is exact only up to fp rounding; the
    ES engines restore from an fp32 master instead."""
    for name, p in params.items():
        p.add_(noise(seed, name, p.shape, device=p.device, dtype=p.dtype, kind=kind), alpha=scale)


@torch.no_grad()
def apply_update(params: Mapping[str, torch.Tensor], seeds: Sequence[int], z: Sequence[float], sigma: float,
                 alpha: float, member_signs: Sequence[int] | None = None, kind: str = "generator") -> None:
    """θ ← θ + α/(Nσ)·Σᵢ zᵢ·sᵢ·ε(seedᵢ), in place, accumulated per tensor in fp32. Members sharing a seed (an
    antithetic pair) are summed first, so each seed's noise is generated once per tensor, in first-seen order."""
    n = len(seeds)
    if len(z) != n:
        raise ValueError(f"{n} seeds but {len(z)} rewards")
    coef: dict[int, float] = {}
    for i, (seed, zi) in enumerate(zip(seeds, z)):
        sign = member_signs[i] if member_signs else 1
        coef[int(seed)] = coef.get(int(seed), 0.0) + float(alpha) / (n * float(sigma)) * float(zi) * sign
    check_kind(kind)

    def step(name: str) -> torch.Tensor:
        out = torch.zeros(params[name].shape)
        if kind == "table":  # window by window, straight from the table
            table, flat = noise_table(), out.view(-1)
            for seed, c in coef.items():
                for start, length, offset in windows(seed, name, out.numel()) if c else ():
                    flat[start:start + length].add_(table[offset:offset + length], alpha=c)
            return out
        eps = torch.empty(out.shape)
        for seed, c in coef.items():
            if c:
                out.add_(noise_into(eps, seed, name), alpha=c)
        return out

    for name, s in pooled(step, list(params)):  # tensors side by side on torch's threads; each sums in order
        params[name].add_(s.to(device=params[name].device, dtype=params[name].dtype))
