"""Seeded Gaussian noise, one stream per (member seed, tensor name): never one stream for every tensor, so two
tensors of the same shape get different noise, and a worker regenerates a member's noise from its seed alone.

Two kinds (`es.noise`), both bitwise the same in every process:
- `table` (the default): one shared table of 2**26 standard normals, generated once per process from a fixed
  seed; a tensor's noise is a run of table windows of up to 2**22 entries, each at an offset hashed from (seed,
  tensor name, window). Reading a window costs a memory pass instead of generating normals, so a member is one
  fused multiply-add per tensor. Windows at different offsets are different iid draws.
- `generator`: a torch CPU generator seeded per (seed, tensor name) draws the whole tensor (the runs recorded
  before the table; about 0.27 s per 10⁸ entries on one core), a few tensors ahead on torch's threads.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np
import torch

T = TypeVar("T")
KINDS = ("table", "generator")
TABLE_SEED = 0x5EED_7AB1E
TABLE_SIZE = 1 << 26  # 256 MiB of fp32
WINDOW = 1 << 22


def tensor_seed(seed: int, name: str) -> int:
    """A 63-bit seed for one tensor of one member (stable across processes, machines and Python versions)."""
    digest = hashlib.blake2b(f"{int(seed)}\0{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


@functools.lru_cache(maxsize=4)
def noise_table(device: str = "cpu") -> torch.Tensor:
    """The shared table: TABLE_SIZE standard normals from TABLE_SEED (on the CPU, then copied to `device`)."""
    table = torch.randn(TABLE_SIZE, generator=torch.Generator(device="cpu").manual_seed(TABLE_SEED))
    return table if str(device) == "cpu" else table.to(device)


def windows(seed: int, name: str, numel: int) -> list[tuple[int, int, int]]:
    """(start in the flattened tensor, length, table offset) of each window of tensor `name` for member `seed`."""
    return [(s, min(WINDOW, numel - s), tensor_seed(seed, f"{name}#{k}") % (TABLE_SIZE - WINDOW + 1))
            for k, s in enumerate(range(0, numel, WINDOW))]


def check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown noise kind '{kind}' (expected {' or '.join(KINDS)})")


def noise(seed: int, name: str, shape, *, device="cpu", dtype=torch.float32, kind: str = "generator") -> torch.Tensor:
    """ε for tensor `name` of member `seed` (a new tensor): standard normal, bitwise the same in every process."""
    check_kind(kind)
    shape = tuple(shape)
    if kind == "table":
        table = noise_table(str(device))
        eps = torch.cat([table[o:o + n] for _, n, o in windows(seed, name, math.prod(shape))]).view(shape)
        return eps.to(dtype=dtype)
    g = torch.Generator(device="cpu").manual_seed(tensor_seed(seed, name))
    eps = torch.randn(shape, generator=g, dtype=torch.float32)
    return eps.to(device=device, dtype=dtype)


def noise_into(out: torch.Tensor, seed: int, name: str) -> torch.Tensor:
    """`noise(seed, name, out.shape)` (generator kind) written into the fp32 CPU tensor `out`, no allocation."""
    return out.normal_(generator=torch.Generator(device="cpu").manual_seed(tensor_seed(seed, name)))


def add_noise(out: torch.Tensor, w: torch.Tensor, seed: int, name: str, scale: float, kind: str) -> torch.Tensor:
    """out = w + scale·ε(seed, name), one fused multiply-add per element (`out` may be w); fp32, same device."""
    if kind == "table":
        table, flat_w, flat = noise_table(str(w.device)), w.reshape(-1), out.view(-1)
        for s, n, o in windows(seed, name, w.numel()):
            torch.add(flat_w[s:s + n], table[o:o + n], alpha=scale, out=flat[s:s + n])
        return out
    check_kind(kind)
    eps = noise_into(out if out.device.type == "cpu" and out is not w else torch.empty(w.shape), seed, name)
    return torch.add(w, eps.to(w.device), alpha=scale, out=out)


def threads() -> int:
    """Threads for generated noise: torch's intra-op count (1 under OMP_NUM_THREADS=1). Each tensor has its own
    generator, so the result never depends on it."""
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


def perturbed(master: Mapping[str, torch.Tensor], seed: int, scale: float, kind: str = "table",
              workers: int | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, θ + scale·ε(seed, name)) for each fp32 tensor of `master`, each a new tensor made by one fused
    multiply-add. Generated noise is drawn ahead on `workers` threads; table noise needs none."""
    check_kind(kind)

    def member(name: str) -> torch.Tensor:
        w = master[name]
        return add_noise(torch.empty(w.shape, dtype=torch.float32, device=w.device), w, seed, name, scale, kind)

    return pooled(member, list(master), 1 if kind == "table" else workers)


def member_seeds(base_seed: int, iteration: int, population: int, *, antithetic: bool = False) -> list[int]:
    """The noise seeds of one iteration's members. With antithetic pairs, members 2j and 2j+1 share a seed (the
    second is the mirror, −ε), so `population` must be even."""
    if antithetic and population % 2:
        raise ValueError(f"antithetic sampling needs an even population, got {population}")
    rng = np.random.default_rng([int(base_seed), int(iteration)])
    draws = rng.integers(0, 2**31 - 1, size=population // 2 if antithetic else population)
    return [int(s) for s in (np.repeat(draws, 2) if antithetic else draws)]
