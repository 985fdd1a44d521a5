"""Which tensors ES writes (`es.scope`), and a sequenced start's update added to θ_0."""

from __future__ import annotations

import re

import torch

from hyper_es.errors import HyperESError


def es_tensors(names_shapes: dict[str, tuple[int, ...]], scope: str, layer_pattern: str, lora=None) -> list[str]:
    """The tensors ES writes: every checkpoint tensor (`full`), the 2-D weights inside the layers (`all_linear`),
    or the LoRA targets among those (`lora`, with `lora` a LoraShape)."""
    if scope == "full":
        return sorted(names_shapes)
    if scope == "all_linear":
        layer = re.compile(layer_pattern)
        return sorted(n for n, s in names_shapes.items() if len(s) == 2 and layer.search(n))
    if scope == "lora":
        from hyper_es.es.lora import lora_weights

        return lora_weights(names_shapes, lora, layer_pattern)
    raise HyperESError(f"es.scope: unknown scope '{scope}' (expected full, all_linear or lora)")


def add_start(master: dict[str, torch.Tensor], start: dict[str, torch.Tensor]) -> None:
    """θ_0 = base + the start row's update (sequencing); the update must lie inside the ES tensors."""
    check_start(master, start)
    for n, d in start.items():
        master[n] += d.to(master[n].device, torch.float32)


def check_start(names, start: dict) -> None:
    """The start's update must lie inside the ES tensors (`names`)."""
    outside = sorted(set(start) - set(names))
    if outside:
        raise HyperESError(f"es.start: the start's update touches '{outside[0]}', outside es.scope; use scope: full "
                           f"or all_linear to cover it")
