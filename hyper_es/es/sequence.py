"""ES → GRPO-LoRA: a GRPO-LoRA job with the baseline's settings, trained on top of the weights ES kept
(RUN/es/grpo/). Its row's update is ES's (replayed) plus the LoRA's B·A, one dense direction."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from hyper_es.directions.manifest import read_manifest

GRPO_DIR = "grpo"
JOB = "es-grpo"


def grpo_folder(run_dir: str | Path) -> Path:
    return Path(run_dir) / "es" / GRPO_DIR


def es_then_grpo(recipe, run_dir: str | Path) -> Path:
    """Train (or skip, once finished) the GRPO-LoRA job on base + ES's kept update; returns its adapter folder."""
    from hyper_es import models
    from hyper_es.directions.collect import run_job
    from hyper_es.directions.jobs import plan_baseline
    from hyper_es.es.delta import es_delta
    from hyper_es.models.identity import weights_hash

    folder = grpo_folder(run_dir)
    if read_manifest(folder) is not None:
        return folder
    base = models.resolve(recipe.model.name, revision=recipe.model.revision)
    delta, _ = es_delta(run_dir, base)
    return run_job(recipe, replace(plan_baseline(recipe), name=JOB), Path(run_dir), weights_hash(base), start=delta,
                   dest=folder)


def es_grpo_delta(run_dir: str | Path, base: str) -> dict[str, torch.Tensor]:
    """{tensor: ΔW} of the ES → GRPO-LoRA model (`base`: the run's base model name): ES's kept update plus the
    adapter's, in fp32."""
    from hyper_es.directions import DirectionSet
    from hyper_es.es.delta import es_delta

    lora = DirectionSet.from_adapters(base, [grpo_folder(run_dir)], [JOB])
    delta, _ = es_delta(run_dir, lora.base_path)
    for t in lora[0].parts:
        d = lora.delta(0, t)
        delta[t] = delta[t] + d if t in delta else d.clone()
    return delta
