"""A linear merge of LoRA directions as one LoRA: Σ_k w_k·s_k·B_k A_k = [w_1 s_1 B_1, …]·[A_1; …] per tensor.

A candidate of a linear merge (task arithmetic, or DARE-linear at density 1) is then an adapter, which an engine
serves beside its own weights, so nothing of the update rounds into bf16 weights. The stacked A is the same for
every candidate: it is built once per tensor, with bit-identical rows of different directions kept once (snapshot
increments share half their factors: B_k A_k − B_{k-1} A_{k-1} and the next one both hold A_k), and a candidate
only scatters its weighted B columns onto it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from hyper_es.errors import HyperESError


def linear_reason(plan) -> str | None:
    """Why the plan's merge is not a LoRA (None: it is): TIES elects signs per entry, DARE masks per entry, and a
    dense direction has no factors."""
    if plan.ties:
        return f"merge method {plan.s.method} elects signs per entry"
    if plan.kind is not None and (plan.s.density < 1 or plan.genome.density_keys):
        return f"merge method {plan.s.method} masks entries (density < 1)"
    for d in plan.ds.directions:
        dense = [t for t in plan.tensors if t in d.parts and not hasattr(d.parts[t], "B")]
        if dense:
            return f"direction '{d.name}' has a dense ΔW for '{dense[0]}' (no LoRA factors)"
    return None


@dataclass
class StackedFactors:
    """One tensor's shared A (R×in) and, per direction, which of its rows each of the direction's A rows is."""

    A: torch.Tensor
    rows: list[torch.Tensor | None]  # per direction: indices into A's rows (None: the direction skips the tensor)
    B: list[torch.Tensor | None]  # per direction: scale·B (out×r_k)

    @property
    def rank(self) -> int:
        return self.A.shape[0]


def stack(plan, tensor: str, device="cpu") -> StackedFactors:
    """The tensor's factors over every direction of the plan, identical A rows merged."""
    seen: dict[bytes, int] = {}
    a_rows, rows, bs = [], [], []
    for d in plan.ds.directions:
        part = d.parts.get(tensor)
        if part is None:
            rows.append(None)
            bs.append(None)
            continue
        a = part.A.to(device, torch.float32)
        idx = []
        for row in a:
            key = row.cpu().numpy().tobytes()
            if key not in seen:
                seen[key] = len(a_rows)
                a_rows.append(row)
            idx.append(seen[key])
        rows.append(torch.tensor(idx, device=device))
        bs.append(part.scale * part.B.to(device, torch.float32))
    return StackedFactors(torch.stack(a_rows), rows, bs)


class LowRankPlan:
    """Per-candidate LoRA factors of a linear MergePlan: `factors(x)` yields (tensor, A, B) with B @ A equal to
    the plan's merged ΔW for genome x (up to fp32 summation order)."""

    def __init__(self, plan, device="cpu"):
        reason = linear_reason(plan)
        if reason:
            raise HyperESError(f"a LoRA candidate needs a linear merge of LoRA directions: {reason}")
        self.plan = plan
        self.stacked = {t: stack(plan, t, device) for t in plan.tensors}

    @property
    def rank(self) -> int:
        """The adapters' rank: the largest stacked rank over the tensors."""
        return max(s.rank for s in self.stacked.values())

    def factors(self, x) -> Iterator[tuple[str, torch.Tensor, torch.Tensor]]:
        plan = self.plan
        x = plan.genome.check(x)
        coef = torch.tensor(x[: len(plan.genome.keys)], dtype=torch.float64)
        for t, st in self.stacked.items():
            w = coef[plan.key_idx[t]]
            factor = plan.s.lam
            if plan.s.normalize:  # as `combine`: divide by the weights' sum unless it is ~0
                total = float(w.to(torch.float32).sum())
                factor = factor / total if abs(total) >= 1e-8 else factor
            b = torch.zeros(plan.ds.base_shapes[t][0], st.rank, dtype=torch.float32, device=st.A.device)
            for k, (idx, bk) in enumerate(zip(st.rows, st.B)):
                if idx is not None:
                    b.index_add_(1, idx, bk * float(w[k].to(torch.float32)) * factor)
            yield t, st.A, b
