"""ES over LoRA factors (`es.scope: lora`): θ is {A (r×in), B (out×r)} for every LoRA target weight W of the
recipe's `gradient.lora` (r, alpha, targets); the installed weight is W = W₀ + (alpha/r)·B·A. A starts as
PEFT's Gaussian init (std 1/r, here from a seeded stream) and B at zero, so θ₀ installs W₀ exactly. Members
perturb the factors (one noise stream per factor name), so a member and an update still travel as seeds."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import torch

from hyper_es.errors import HyperESError
from hyper_es.es.noise import noise

INIT_SEED = 0x10A  # the A init's stream (with the factor's name), fixed so replay needs no stored init


@dataclass(frozen=True)
class LoraShape:
    r: int
    alpha: float
    targets: tuple[str, ...]

    @property
    def scaling(self) -> float:
        return self.alpha / self.r

    @classmethod
    def from_recipe(cls, recipe) -> LoraShape:
        lora = recipe.gradient.lora
        return cls(lora.r, float(lora.alpha), tuple(lora.targets))


def lora_weights(names_shapes: Mapping[str, tuple[int, ...]], shape: LoraShape, layer_pattern: str) -> list[str]:
    """The 2-D weights inside the layers whose module name ends in one of the targets."""
    layer = re.compile(layer_pattern)
    out = sorted(n for n, s in names_shapes.items() if len(s) == 2 and layer.search(n) and n.endswith(".weight")
                 and n.removesuffix(".weight").rsplit(".", 1)[-1] in shape.targets)
    if not out:
        raise HyperESError(f"es.scope lora: no weight matches gradient.lora.targets {list(shape.targets)}")
    return out


def init_factors(shapes: Mapping[str, tuple[int, ...]], r: int, device="cpu") -> dict[str, torch.Tensor]:
    """{W:A: N(0, 1/r²) of shape (r, in), W:B: zeros (out, r)} for every weight W."""
    out = {}
    for w, (rows, cols) in shapes.items():
        out[f"{w}:A"] = noise(INIT_SEED, f"{w}:A", (r, cols), device=device) / r
        out[f"{w}:B"] = torch.zeros((rows, r), dtype=torch.float32, device=device)
    return out


def member_factors(names, factors: Mapping[str, torch.Tensor], member: tuple[int, float] | None = None,
                   kind: str = "generator") -> Iterator[tuple[str, torch.Tensor, torch.Tensor]]:
    """(W, A', B') per weight: the factors, plus scale·ε(seed) for a member (noise of `kind`)."""
    for w in names:
        a, b = factors[f"{w}:A"], factors[f"{w}:B"]
        if member is not None:
            seed, scale = member
            a = a + scale * noise(seed, f"{w}:A", a.shape, device=a.device, kind=kind)
            b = b + scale * noise(seed, f"{w}:B", b.shape, device=b.device, kind=kind)
        yield w, a, b


def installed(w0: Mapping[str, torch.Tensor], factors: Mapping[str, torch.Tensor], scaling: float,
              member: tuple[int, float] | None = None, kind: str = "generator") -> Iterator[tuple[str, torch.Tensor]]:
    """(W, W₀ + scaling·B'·A') per weight, in fp32; B', A' are the factors, plus scale·ε(seed) for a member (noise
    of `kind`; A's init is always generated)."""
    for (w, a, b), base in zip(member_factors(w0, factors, member, kind), w0.values()):
        yield w, base + scaling * (b @ a)


def lora_delta(factors: Mapping[str, torch.Tensor], scaling: float) -> dict[str, torch.Tensor]:
    """{W: scaling·B·A}: the update the factors install."""
    return {k[:-2]: scaling * (factors[k[:-2] + ":B"] @ factors[k]) for k in factors if k.endswith(":A")}
