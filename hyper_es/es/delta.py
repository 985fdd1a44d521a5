"""θ_kept − θ_0 of an ES run, rebuilt from its history (no weights are stored): the replayed updates summed onto
zeros in fp32. It equals the engine's θ − θ_0 up to fp32 rounding, and serves as a dense direction, so the final
evaluation scores ES with the same resident engine and paired records as every other row."""

from __future__ import annotations

from pathlib import Path

import torch

from hyper_es.errors import DataError
from hyper_es.io import read_json


def es_delta(run_dir: str | Path, base: str | Path) -> tuple[dict[str, torch.Tensor], dict]:
    """({tensor: ΔW}, RUN/es/result.json) for the weights the guard kept (`kept_iterations` of the history), on
    top of the start row's update when ES was sequenced (RUN/es/start.safetensors)."""
    from hyper_es import architectures
    from hyper_es.directions.sources import tensor_shapes
    from hyper_es.es.engine import es_tensors
    from hyper_es.es.run import HISTORY, START, read_history
    from hyper_es.es.update import apply_update

    out = Path(run_dir) / "es"
    result = read_json(out / "result.json", "delete it to finish ES again (re-run)")
    config = read_json(out / "config.json", "delete RUN/es to restart ES")
    kept = result.get("kept_iterations") if isinstance(result, dict) else None
    if not isinstance(kept, int):
        raise DataError(f"{out / 'result.json'}: no kept_iterations; delete it to finish ES again")
    history = read_history(out / HISTORY, config["es"]["population"])
    if len(history) < kept:
        raise DataError(f"{out / HISTORY}: {len(history)} iterations, but the result keeps {kept}")
    shapes = tensor_shapes(base)
    names = es_tensors(shapes, config["es"]["scope"], architectures.for_model(base).layer_pattern)
    delta = {n: torch.zeros(shapes[n], dtype=torch.float32) for n in names}
    if (out / START).is_file():  # sequenced: the start row's update first, as the engine's θ_0
        from safetensors.torch import load_file

        for n, d in load_file(str(out / START)).items():
            delta[n] += d
    for rec in history[:kept]:
        apply_update(delta, rec["seeds"], rec["z"], rec["sigma"], rec["alpha"], rec["signs"])
    return delta, result
