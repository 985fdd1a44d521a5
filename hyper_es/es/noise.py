"""Seeded Gaussian noise, one stream per (member seed, tensor name): never one stream for every tensor, so two
tensors of the same shape get different noise, and a worker regenerates a member's noise from its seed alone."""

from __future__ import annotations

import hashlib

import numpy as np
import torch


def tensor_seed(seed: int, name: str) -> int:
    """A 63-bit seed for one tensor of one member (stable across processes, machines and Python versions)."""
    digest = hashlib.blake2b(f"{int(seed)}\0{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def noise(seed: int, name: str, shape, *, device="cpu", dtype=torch.float32) -> torch.Tensor:
    """ε for tensor `name` of member `seed`: standard normal, generated in fp32 on the CPU (bitwise the same in
    every process), then moved to `device` and `dtype`."""
    g = torch.Generator(device="cpu").manual_seed(tensor_seed(seed, name))
    eps = torch.randn(tuple(shape), generator=g, dtype=torch.float32)
    return eps.to(device=device, dtype=dtype)


def member_seeds(base_seed: int, iteration: int, population: int, *, antithetic: bool = False) -> list[int]:
    """The noise seeds of one iteration's members. With antithetic pairs, members 2j and 2j+1 share a seed (the
    second is the mirror, −ε), so `population` must be even."""
    if antithetic and population % 2:
        raise ValueError(f"antithetic sampling needs an even population, got {population}")
    rng = np.random.default_rng([int(base_seed), int(iteration)])
    draws = rng.integers(0, 2**31 - 1, size=population // 2 if antithetic else population)
    return [int(s) for s in (np.repeat(draws, 2) if antithetic else draws)]
