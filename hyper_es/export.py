"""Exports of a merge: an HF folder, a mergekit YAML that reproduces it, or a PEFT LoRA adapter (truncated SVD)."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np
import torch
import yaml

from hyper_es.directions.sources import CheckpointDiff, LoraFactors
from hyper_es.errors import HyperESError
from hyper_es.merging import Genome, MergePlan, MergeSettings
from hyper_es.rows import names as row_names
from hyper_es.rundir import ADAPTER_CONFIG, ADAPTER_WEIGHTS

logger = logging.getLogger(__name__)


def export_hf(ds, genome: Genome, x, settings: MergeSettings, out: str | Path) -> Path:
    """save_pretrained folder of the merged model, tokenizer included."""
    return _save_hf(ds.base_path, MergePlan(ds, genome, settings, prepare=False).deltas(x), out)


def _save_hf(base_path, deltas, out: str | Path) -> Path:
    """The base model plus each (tensor, ΔW) of `deltas`, as a save_pretrained folder with the tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = Path(out)
    model = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32)
    state = model.state_dict()
    with torch.no_grad():
        for t, delta in deltas:
            state[t].add_(delta.to(state[t].dtype))
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(base_path).save_pretrained(out)
    return out


def _model_ref(ds, k: int) -> str:
    d = ds[k]
    parts = list(d.parts.values())
    if all(isinstance(p, LoraFactors) for p in parts) and Path(d.origin).is_dir():
        return f"{ds.base_path}+{Path(d.origin).resolve()}"  # mergekit's BASE+ADAPTER reference
    if parts and all(isinstance(p, CheckpointDiff) for p in parts):
        return str(Path(d.origin).resolve())
    raise HyperESError(f"direction '{d.name}' lives only in memory; save it as an adapter or checkpoint to export "
                       f"it for mergekit")


def mergekit_config(ds, genome: Genome, x, settings: MergeSettings) -> dict:
    """A mergekit config reproducing the merge. Layer-wise values become per-layer lists (exact for N values on
    N layers); module groups become the family's `filter` entries. Exact only at density 1: mergekit draws its own
    DARE masks."""
    if genome.non_layer:
        raise HyperESError("the genome has a non-layer coefficient group (embeddings/lm_head); mergekit's per-layer "
                           "lists cannot express it exactly")
    arch = genome.arch
    filters = [(m, arch.mergekit_filter(m)) for m in ("attention", "mlp") if arch.mergekit_filter(m)]
    if genome.module_groups:
        for t in ds.base_shapes:  # mergekit applies the first filter that is a substring of the name
            first = next((m for m, f in filters if f in t), "other")
            if first != arch.module_group(t):
                raise HyperESError(f"{arch.name}.json: mergekit filters put '{t}' in module group '{first}', its "
                                   f"module_groups in '{arch.module_group(t)}'")
    coef = genome.coefficients(x)
    dens = genome.layer_densities(x, settings.density)
    per_layer = lambda d, m: [coef.get(genome.key_for(arch.layer_prefix(i), d)[:2] + (m,), 0.0)  # noqa: E731
                              for i in range(genome.num_layers)]  # a group without genes changes no tensor: 0
    models = []
    for k, d in enumerate(ds.names):
        if genome.module_groups:
            weight = [{"filter": f, "value": per_layer(d, m)} for m, f in filters] + [{"value": per_layer(d, "other")}]
        else:
            weight = per_layer(d, "all")
        per_layer_density = [dens[(genome.key_for(arch.layer_prefix(i), d)[0], d)] for i in range(genome.num_layers)]
        density = per_layer_density if genome.per_layer_density else per_layer_density[0]  # mergekit: a list per layer
        models.append({"model": _model_ref(ds, k), "parameters": {"weight": weight, "density": density}})
    return {
        "merge_method": settings.method,
        "base_model": str(ds.base_path),
        "models": models,
        "parameters": {"normalize": settings.normalize, "lambda": settings.lam, "rescale": settings.rescale == "l1"}
        if settings.method.startswith("dare") else {"normalize": settings.normalize, "lambda": settings.lam},
        "dtype": "float32",
    }


def export_mergekit(ds, genome: Genome, x, settings: MergeSettings, out: str | Path) -> Path:
    out = Path(out)
    if settings.density < 1 or genome.density_keys:
        logger.warning("density < 1: mergekit draws its own random DARE masks, so its result will differ")
    if settings.consensus != "sum" and settings.method in ("ties", "dare_ties"):
        raise HyperESError("mergekit's ties/dare_ties use sign election by sum; consensus 'count' has no equivalent")
    out.write_text(yaml.safe_dump(mergekit_config(ds, genome, x, settings), sort_keys=False))
    return out


MAX_ERROR = 0.01  # a PEFT export further than this from the merge is refused unless the caller accepts more


class SvdErrors(dict):
    """Relative error per module, and `whole`: the whole update's ‖ΔW − BA‖ / ‖ΔW‖ over every module."""

    whole: float = 0.0


def export_peft(ds, genome: Genome, x, settings: MergeSettings, out: str | Path, rank: int = 16,
                max_error: float | None = MAX_ERROR) -> dict:
    """The merged update as a LoRA adapter of `rank` (truncated SVD per module). Returns relative errors per module.
    Exact (to float rounding) for a linear merge (task arithmetic, or DARE-linear at density 1) when `rank` ≥ the
    sum of the directions' ranks; TIES and DARE mask entries, so their update is full rank and only approximated."""
    return _save_peft(ds.base_path, MergePlan(ds, genome, settings, prepare=False).deltas(x), out, rank, max_error)


def _save_peft(base_path, deltas, out: str | Path, rank: int, max_error: float | None = MAX_ERROR) -> dict:
    """Each (tensor, ΔW) of `deltas` as a LoRA pair of `rank` (truncated SVD); returns the relative errors per module.
    Refused, before anything is written, when the whole update's relative error ‖ΔW − BA‖ / ‖ΔW‖ (over every module)
    exceeds `max_error` (None: any)."""
    from safetensors.torch import save_file

    out = Path(out)
    tensors, errors, targets, sq = {}, {}, set(), [0.0, 0.0]  # (Σ‖ΔW − BA‖², Σ‖ΔW‖²)
    for t, delta in deltas:
        if delta.dim() != 2 or not t.endswith(".weight"):
            raise HyperESError(f"tensor '{t}' is not a 2-D weight; a LoRA adapter cannot hold it")
        u, s, vh = torch.linalg.svd(delta.double(), full_matrices=False)
        r = min(rank, s.numel())
        b, a = (u[:, :r] * s[:r]).float(), vh[:r].float()
        norm, err = float(delta.norm()), float((delta - b @ a).norm())
        errors[t] = err / norm if norm else 0.0
        sq[0], sq[1] = sq[0] + err ** 2, sq[1] + norm ** 2
        module = t.removesuffix(".weight")
        tensors[f"base_model.model.{module}.lora_A.weight"] = a.contiguous()
        tensors[f"base_model.model.{module}.lora_B.weight"] = b.contiguous()
        targets.add(module.rsplit(".", 1)[-1])
    overall = (sq[0] / sq[1]) ** 0.5 if sq[1] else 0.0
    if max_error is not None and overall > max_error:
        raise HyperESError(f"a rank-{rank} LoRA is {overall:.1%} off the merged update (‖ΔW − BA‖ / ‖ΔW‖; "
                           f"--max-error {max_error:g}); nothing written. Export --format hf (exact), raise --rank, or "
                           f"accept it with --max-error {math.ceil(overall * 100) / 100:g}")
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / ADAPTER_WEIGHTS))
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": rank,  # scale 1
              "target_modules": sorted(targets), "lora_dropout": 0.0, "bias": "none", "use_rslora": False,
              "base_model_name_or_path": str(base_path), "fan_in_fan_out": False, "use_dora": False}
    (out / ADAPTER_CONFIG).write_text(json.dumps(config, indent=1))
    (out / "svd_errors.json").write_text(json.dumps({"update": overall, "modules": errors}, indent=1))
    errors = SvdErrors(errors)
    errors.whole = overall
    worst = max(errors.values(), default=0.0)
    logger.info("peft export rank %d: relative error of the update %.3g; per module mean %.3g, max %.3g", rank,
                overall, float(np.mean(list(errors.values()))) if errors else 0.0, worst)
    return errors


def export_row(recipe, run: str | Path, row: str, format: str, out: str | Path, rank: int = 16,
               max_error: float | None = MAX_ERROR) -> tuple:
    """One row of the run's report, as it was evaluated: base + its ΔW (`rows.row_update`) as an HF folder or a
    PEFT adapter, and, for a `<row>+prompt` row, its co-evolved prompt beside it. Returns (the SVD errors or None,
    the prompt file or None)."""
    from hyper_es import models
    from hyper_es.rows import prompt_file, row_update

    if format not in ("hf", "peft"):
        raise HyperESError(f"a row exports as hf or peft, not {format} (mergekit: export the search's genome, or "
                           f"--weights for a direction or the baseline)")
    run = Path(run)
    base = models.resolve(recipe.model.name, revision=recipe.model.revision)
    deltas = row_update(run, row_names.weights_of(row), recipe).items()
    errors = None
    if format == "peft":
        errors = _save_peft(base, deltas, out, rank, max_error)
    else:
        _save_hf(base, deltas, out)
    if not row_names.is_prompted(row):
        return errors, None
    saved = prompt_file(run, row)
    prompt = export_prompt(saved, out)
    if prompt is None:
        raise HyperESError(f"{saved}: row '{row}' has no prompt there")
    return errors, prompt


def export_prompt(saved: str | Path, out: str | Path) -> Path | None:
    """A chosen prompt (`rows.prompt_file`: RUN/search/prompt.json, RUN/es/prompt.json, or a prompt control's
    RUN/eval/val/<row>+prompt.json) for serving beside an export: `prompt.json` in the folder `out` (hf, peft), or
    beside the file `out` (mergekit). Per task, the system turn, the filled few-shot turns and the template;
    `tasks.prompt_genome.render_exported` renders a row with it to the exact text that was scored. None: no such
    file (that stage chose no prompt)."""
    from hyper_es.io import read_json, write_json_atomic

    saved, out = Path(saved), Path(out)
    if not saved.is_file():
        return None
    data = read_json(saved, "re-run the stage that chose it (search, es or the final evaluation) to write it again")
    exported = data.get("exported")
    if not isinstance(exported, dict) or not all(
            isinstance(v, dict) and {"system", "shots", "template", "chat"} <= set(v) for v in exported.values()):
        raise HyperESError(f"{saved}: exported: expected per task an object with system, shots, template and chat "
                           f"(a prompt whose examples are drawn per row cannot be exported)")
    path = out / "prompt.json" if out.is_dir() else out.with_name(out.stem + ".prompt.json")
    write_json_atomic(path, {"tasks": exported, "from": f"{saved.parent.name}/{saved.name}", "genes": data.get("genes")})
    return path
