"""θ_kept − base of an ES run, rebuilt from its history (no weights are stored): a sequenced start's update plus
the replayed updates, summed onto zeros in fp32 (`scope: lora`: the factors replayed from their init, then s·B·A).
It equals the engine's θ − base up to fp32 rounding, and serves as a dense direction, so the final evaluation
scores ES with the same resident engine and paired records as every other row."""

from __future__ import annotations

from pathlib import Path

import torch

from hyper_es.errors import DataError
from hyper_es.io import read_json
from hyper_es.rundir import ES_CONFIG, ES_DIR, RESULT_FILE


def es_delta(run_dir: str | Path, base: str | Path) -> tuple[dict[str, torch.Tensor], dict]:
    """({tensor: ΔW}, RUN/es/result.json) for the weights the guard kept (`kept_iterations` of the history), on
    top of the start row's update when ES was sequenced (RUN/es/start.safetensors)."""
    from hyper_es import architectures
    from hyper_es.directions.sources import tensor_shapes
    from hyper_es.es.history import HISTORY, START, read_history
    from hyper_es.es.scope import es_tensors
    from hyper_es.es.update import apply_update

    out = Path(run_dir) / ES_DIR
    result = read_json(out / RESULT_FILE, "delete it to finish ES again (re-run)")
    config = read_json(out / ES_CONFIG, "delete RUN/es to restart ES")
    kept = result.get("kept_iterations") if isinstance(result, dict) else None
    if not isinstance(kept, int):
        raise DataError(f"{out / RESULT_FILE}: no kept_iterations; delete it to finish ES again")
    history = read_history(out / HISTORY, config["es"]["population"])
    if len(history) < kept:
        raise DataError(f"{out / HISTORY}: {len(history)} iterations, but the result keeps {kept}")
    shapes = tensor_shapes(base)
    kind = config["es"].get("noise", "generator")  # runs recorded before the table have no key
    lora = None
    if config["es"]["scope"] == "lora":
        from hyper_es.es.lora import LoraShape

        lora = LoraShape(config["lora"]["r"], float(config["lora"]["alpha"]), tuple(config["lora"]["targets"]))
    names = es_tensors(shapes, config["es"]["scope"], architectures.for_model(base).layer_pattern, lora)
    start = {}
    if (out / START).is_file():  # sequenced: the start row's update (the engine's θ_0 is base + it)
        from safetensors.torch import load_file

        start = load_file(str(out / START))
    if lora is None:
        delta = {n: torch.zeros(shapes[n], dtype=torch.float32) for n in names}
        for n, d in start.items():
            delta[n] += d
        for rec in history[:kept]:
            apply_update(delta, rec["seeds"], rec["z"], rec["sigma"], rec["alpha"], rec["signs"], kind=kind)
    else:  # the factors replayed from their init; the update is what they install, on top of the start's
        from hyper_es.es.lora import init_factors, lora_delta

        factors = init_factors({n: shapes[n] for n in names}, lora.r)
        for rec in history[:kept]:
            apply_update(factors, rec["seeds"], rec["z"], rec["sigma"], rec["alpha"], rec["signs"], kind=kind)
        delta = lora_delta(factors, lora.scaling)
        for n, d in start.items():
            delta[n] = delta[n] + d
    return delta, result
