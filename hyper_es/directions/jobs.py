"""Plan the gradient stage: K GRPO-LoRA jobs that differ by seed, data shard, learning rate, steps or LoRA."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from hyper_es.errors import RecipeError
from hyper_es.recipe import LoraConfig, Recipe

BASELINE = "baseline"


@dataclass(frozen=True)
class JobSpec:
    name: str
    seed: int
    learning_rate: float
    steps: int
    shard: int | None
    num_shards: int
    lora: LoraConfig
    baseline: bool = False
    task: str | None = None  # vary: task: the one task this job trains on
    by_difficulty: bool = False  # shard k of num_shards is the k-th bin by base pass rate (hardest first)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["lora"] = self.lora.model_dump()
        for key, default in (("task", None), ("by_difficulty", False)):  # old manifests have neither
            if d[key] == default:
                del d[key]
        return d


def plan_directions(recipe: Recipe) -> list[JobSpec]:
    """One job per direction. `vary` spreads seeds (seed+k), shards (k of K), difficulty bins (k of K, by the base
    pass rate), learning rates (×2^(k-(K-1)/2)) and tasks (the first K/T jobs on the first task, ...; shards and
    bins are then counted within each task)."""
    g = recipe.gradient
    k_total = g.directions
    tasks = recipe.training_task_names() if "task" in g.vary else [None]
    per_task = k_total // len(tasks)
    split = "shard" in g.vary or "difficulty" in g.vary
    jobs = []
    for k in range(k_total):
        o = g.jobs[k] if k < len(g.jobs) else None
        lr = g.learning_rate * (2 ** (k - (k_total - 1) / 2) if "learning_rate" in g.vary else 1.0)
        shard = k % per_task if split else None
        jobs.append(JobSpec(
            name=(o.name if o and o.name else f"dir-{k}"),
            seed=o.seed if o and o.seed is not None else g.seed + (k if "seed" in g.vary else 0),
            learning_rate=o.learning_rate if o and o.learning_rate else lr,
            steps=o.steps if o and o.steps else g.steps,
            shard=o.shard if o and o.shard is not None else shard,
            num_shards=per_task,
            lora=o.lora if o and o.lora else g.lora,
            task=tasks[k // per_task], by_difficulty="difficulty" in g.vary,
        ))
    names = [j.name for j in jobs]
    if len(set(names)) != len(names) or BASELINE in names:
        raise RecipeError(f"{recipe._path or '<recipe>'}: gradient.jobs: direction names must be unique and not "
                          f"'{BASELINE}', got {names}")
    return jobs


def plan_baseline(recipe: Recipe) -> JobSpec:
    """Plain GRPO-LoRA (K=1) on all the data. Default budget: the directions' total steps / 0.9."""
    g = recipe.gradient
    total = sum(j.steps for j in plan_directions(recipe))
    steps = g.baseline_steps or math.ceil(total / 0.9)
    return JobSpec(BASELINE, g.seed, g.learning_rate, steps, None, 1, g.lora, baseline=True)


SNAPSHOTS = "snapshots"


def snapshot_steps(recipe: Recipe, job: JobSpec) -> set[int]:
    """Steps after which the baseline saves its adapter: every `baseline_snapshot_every` (its accuracy-vs-steps
    curve) and, with `directions_from: snapshots`, the directions' cumulative steps (their boundaries)."""
    g = recipe.gradient
    if not job.baseline:
        return set()
    steps = set(range(g.baseline_snapshot_every, job.steps, g.baseline_snapshot_every)) if g.baseline_snapshot_every else set()
    if g.directions_from == "snapshots":
        steps |= set(snapshot_bounds(recipe))
    return {s for s in steps if s < job.steps}


def snapshot_bounds(recipe: Recipe) -> list[int]:
    """Cumulative steps of the planned directions: direction k is the baseline's update from bound k-1 to k."""
    bounds, total = [], 0
    for job in plan_directions(recipe):
        total += job.steps
        bounds.append(total)
    return bounds
