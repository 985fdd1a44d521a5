"""A row's weight update ΔW, as {tensor: fp32 tensor}: what the sparsity analysis cuts and what ES can start from."""

from __future__ import annotations

from pathlib import Path

import torch

from hyper_es.errors import DataError


def row_update(run_dir: str | Path, row: str, recipe) -> dict[str, torch.Tensor]:
    """ΔW of a row: `hyper-es` (best.json merged as searched), `es` / `<start>+es` (replayed history),
    `…es+grpo` (ES → GRPO-LoRA), or an adapter of the run (`baseline`, `baseline@N`, a direction name)."""
    from hyper_es.directions import DirectionSet
    from hyper_es.merging import Genome, MergePlan, recipe_genome

    run_dir = Path(run_dir)
    if row == "es" or row.endswith("+es"):  # ES (after its start, when sequenced)
        from hyper_es import models
        from hyper_es.es.delta import es_delta

        return es_delta(run_dir, models.resolve(recipe.model.name, revision=recipe.model.revision))[0]
    if row.endswith("es+grpo"):  # ES → GRPO-LoRA
        return es_grpo_delta(run_dir, recipe.model.name)
    if row == "hyper-es":
        ds = DirectionSet.from_run(run_dir)
        genome, x = Genome.from_json(run_dir / "search" / "best.json")
        _, settings = recipe_genome(recipe, ds)
        return {t: d.float() for t, d in MergePlan(ds, genome, settings).deltas(x)}
    name, _, step = row.partition("@")
    folder = run_dir / "directions" / name / (f"snapshots/step-{step}" if step else "")
    if not (folder / "adapter_config.json").is_file():
        raise DataError(f"{folder}: no adapter for row '{row}' (expected hyper-es, es, baseline, baseline@N or a "
                        f"direction of the run)")
    ds = DirectionSet.from_adapters(recipe.model.name, [folder], [row])
    return {t: ds.delta(0, t) for t in ds[0].parts}


def es_grpo_delta(run_dir: str | Path, base: str) -> dict[str, torch.Tensor]:
    """{tensor: ΔW} of the ES → GRPO-LoRA model (`base`: the run's base model name): ES's kept update plus the
    adapter's, in fp32."""
    from hyper_es.directions import DirectionSet
    from hyper_es.es.delta import es_delta
    from hyper_es.es.history import GRPO_JOB, grpo_folder

    lora = DirectionSet.from_adapters(base, [grpo_folder(run_dir)], [GRPO_JOB])
    delta, _ = es_delta(run_dir, lora.base_path)
    for t in lora[0].parts:
        d = lora.delta(0, t)
        delta[t] = delta[t] + d if t in delta else d.clone()
    return delta
