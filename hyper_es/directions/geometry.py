"""The subspace the directions span: per-layer norms, pairwise cosines, effective rank."""

from __future__ import annotations

import math

import torch

from hyper_es import architectures


def layer_of(tensor: str, arch: architectures.Architecture) -> str:
    """'7' for a tensor of layer 7 (in the family's naming), else 'other' (embeddings, final norm, lm_head)."""
    i = arch.layer_index(tensor)
    return "other" if i is None else str(i)


def effective_rank(singular_values: list[float]) -> float:
    """Roy & Vetterli's effective rank: exp(entropy of the L1-normalised singular values)."""
    s = [x for x in singular_values if x > 0]
    total = sum(s)
    if not total:
        return 0.0
    return math.exp(-sum((x / total) * math.log(x / total) for x in s))


def geometry(ds) -> dict:
    """One pass over the tensors, K deltas at a time (never K full models in memory)."""
    k = len(ds)
    arch = architectures.for_model(ds.base_path)
    gram = torch.zeros(k, k, dtype=torch.float64)
    layer_sq: list[dict[str, float]] = [{} for _ in range(k)]
    for t in ds.tensor_names():
        flat = torch.stack([ds.delta(i, t).flatten().double() for i in range(k)])
        gram += flat @ flat.T
        layer = layer_of(t, arch)
        for i in range(k):
            layer_sq[i][layer] = layer_sq[i].get(layer, 0.0) + float(flat[i] @ flat[i])
    norms = gram.diagonal().clamp_min(0).sqrt()
    denom = torch.outer(norms, norms)
    cosine = torch.where(denom > 0, gram / denom.clamp_min(1e-300), torch.zeros_like(gram))
    sv = torch.linalg.eigvalsh(gram).clamp_min(0).sqrt().flip(0).tolist()
    return {
        "names": ds.names,
        "norm": dict(zip(ds.names, norms.tolist())),
        "layer_norms": {n: {layer: math.sqrt(v) for layer, v in sorted(sq.items(), key=lambda kv: _order(kv[0]))}
                        for n, sq in zip(ds.names, layer_sq)},
        "cosine": cosine.tolist(),
        "singular_values": sv,
        "effective_rank": effective_rank(sv),
    }


def _order(layer: str) -> tuple[int, int]:
    return (1, 0) if layer == "other" else (0, int(layer))
