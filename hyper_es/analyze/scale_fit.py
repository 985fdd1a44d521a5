"""`hyper-es analyze scale-fit RUN`: how much of a row's update is one constant scale of another row's?

For each row's update U (hyper-es, es, baseline@N, a direction) against a reference row's update R (by default
`baseline`, the final GRPO-LoRA adapter that the `scaled` control multiplies): the least-squares scale
s = ⟨U, R⟩ / ⟨R, R⟩, the cosine of U and R, and the share of ‖U‖² that no scale of R explains (1 − cos²). The same
per block of layers (by default the recipe's merge.layer_group_size, the genome's layer groups): a layer-wise
search that found more than one scale shows per-block scales that differ and cosines below 1. Reads the run's
adapters; no engine. Writes scale_fit.json to --out.
"""

from __future__ import annotations

from pathlib import Path

import torch

from hyper_es.rows import row_update


def _dots(u: dict[str, torch.Tensor], r: dict[str, torch.Tensor], keys) -> tuple[float, float, float]:
    """⟨U, R⟩, ⟨U, U⟩, ⟨R, R⟩ over the tensors in keys (a tensor one of them lacks counts as zeros)."""
    ur = uu = rr = 0.0
    for k in keys:
        a, b = u.get(k), r.get(k)
        if a is not None:
            uu += float(a.double().pow(2).sum())
        if b is not None:
            rr += float(b.double().pow(2).sum())
        if a is not None and b is not None:
            ur += float((a.double() * b.double()).sum())
    return ur, uu, rr


def fit(u: dict[str, torch.Tensor], r: dict[str, torch.Tensor], keys=None) -> dict:
    """The best constant scale of R for U over keys (all tensors by default), its cosine and the unexplained share."""
    keys = sorted(set(u) | set(r)) if keys is None else keys
    ur, uu, rr = _dots(u, r, keys)
    cos = ur / (uu * rr) ** 0.5 if uu > 0 and rr > 0 else None
    return {"scale": ur / rr if rr > 0 else None, "cosine": cos, "unexplained": None if cos is None else 1 - cos**2,
            "norm": uu**0.5, "reference_norm": rr**0.5}


def blocks(names, arch, size: int) -> dict[str, list[str]]:
    """Tensor names by block of `size` consecutive layers, named by the layers present ("L0-9", ...); tensors
    outside the layers under "other"."""
    by: dict[int | None, list[str]] = {}
    layers: dict[int | None, set[int]] = {}
    for t in sorted(names):
        i = arch.layer_index(t)
        start = None if i is None else i // size * size
        by.setdefault(start, []).append(t)
        layers.setdefault(start, set()).update([] if i is None else [i])
    return {("other" if s is None else f"L{min(layers[s])}-{max(layers[s])}"): by[s]
            for s in sorted(by, key=lambda s: (s is None, s or 0))}


def scale_fit(recipe, run_dir: Path, rows: list[str], reference: str, block_size: int | None = None) -> dict:
    from hyper_es import architectures
    from hyper_es.directions import DirectionSet

    arch = architectures.for_model(DirectionSet.from_run(run_dir).base_path)
    size = block_size or recipe.merge.layer_group_size
    if size == "all":  # one block of every layer
        size = arch.num_layers(architectures.load_config(DirectionSet.from_run(run_dir).base_path))
    ref = row_update(run_dir, reference, recipe)
    result = {"reference": reference, "block_size": size, "rows": {}}
    for row in rows:
        u = row_update(run_dir, row, recipe)
        result["rows"][row] = {**fit(u, ref), "blocks": {b: fit(u, ref, ts) for b, ts in
                                                         blocks(set(u) | set(ref), arch, size).items()}}
    return result


def analyze_scale_fit(recipe, run_dir: Path, rows: list[str], reference: str, out: Path,
                      block_size: int | None = None) -> dict:
    from hyper_es.io import write_json_atomic

    out.mkdir(parents=True, exist_ok=True)
    result = scale_fit(recipe, Path(run_dir), rows, reference, block_size)
    write_json_atomic(out / "scale_fit.json", result)
    return result
