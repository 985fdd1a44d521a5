"""Seeded Gaussian noise, one stream per (member seed, tensor name): never one stream for every tensor, so two
tensors of the same shape get different noise, and a worker regenerates a member's noise from its seed alone."""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np
import torch

T = TypeVar("T")


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


def noise_into(out: torch.Tensor, seed: int, name: str) -> torch.Tensor:
    """`noise(seed, name, out.shape)` written into the fp32 CPU tensor `out` (bitwise the same, no allocation)."""
    return out.normal_(generator=torch.Generator(device="cpu").manual_seed(tensor_seed(seed, name)))


def threads() -> int:
    """Threads for noise: torch's intra-op count (1 under OMP_NUM_THREADS=1). Each tensor has its own generator,
    so the result never depends on it."""
    return max(1, torch.get_num_threads())


def pooled(fn: Callable[[str], T], names: Sequence[str], workers: int | None = None) -> Iterator[tuple[str, T]]:
    """(name, fn(name)) in the order of `names`, computed up to 2·workers tensors ahead on a thread pool (torch
    releases the GIL; a CPU generator is serial, so tensors run side by side)."""
    workers = threads() if workers is None else workers
    if workers <= 1:
        yield from ((n, fn(n)) for n in names)
        return
    with ThreadPoolExecutor(workers, thread_name_prefix="es-noise") as pool:
        ahead: deque = deque()
        it = iter(names)
        for n in it:
            ahead.append((n, pool.submit(fn, n)))
            if len(ahead) >= 2 * workers:
                break
        while ahead:
            n, fut = ahead.popleft()
            nxt = next(it, None)
            if nxt is not None:
                ahead.append((nxt, pool.submit(fn, nxt)))
            yield n, fut.result()


def perturbed(master: Mapping[str, torch.Tensor], seed: int, scale: float,
              workers: int | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, θ + scale·ε(seed, name)) for each fp32 tensor of `master`, each a new tensor (the noise buffer,
    overwritten by one fused multiply-add). Noise is generated ahead on `workers` threads."""
    def member(name: str) -> torch.Tensor:
        w = master[name]
        eps = noise_into(torch.empty(w.shape, dtype=torch.float32), seed, name).to(w.device)
        return torch.add(w, eps, alpha=scale, out=eps)

    return pooled(member, list(master), workers)


def member_seeds(base_seed: int, iteration: int, population: int, *, antithetic: bool = False) -> list[int]:
    """The noise seeds of one iteration's members. With antithetic pairs, members 2j and 2j+1 share a seed (the
    second is the mirror, −ε), so `population` must be even."""
    if antithetic and population % 2:
        raise ValueError(f"antithetic sampling needs an even population, got {population}")
    rng = np.random.default_rng([int(base_seed), int(iteration)])
    draws = rng.integers(0, 2**31 - 1, size=population // 2 if antithetic else population)
    return [int(s) for s in (np.repeat(draws, 2) if antithetic else draws)]
