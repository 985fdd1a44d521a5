"""The GRPO-LoRA baseline tuned with the care the search gets: a learning-rate grid on validation, grown until its
best learning rate is interior, snapshots for early stopping, and the base as the step-0 candidate. Every lr's run
resumes from its folder, and the grid from its JSON.

An lr scores its best trained adapter by validation (a snapshot or the final; ties: fewer steps). The grid starts
at `lrs` (a grid begun earlier goes on from its recorded start, and a recorded lr is kept as recorded); while the
best is its smallest (largest) lr, half (twice) that is added, at most `max_lrs` in all. The baseline row is then
the best candidate by validation at the chosen lr, the base included (no training is a candidate too)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from hyper_es.io import read_json, write_json_atomic
from hyper_es.recipe import Recipe, recipe_from_dict
from hyper_es.rundir import DIRECTIONS_DIR

logger = logging.getLogger(__name__)
CRITERION = ("an lr scores its best trained adapter (snapshots and final) by greedy validation accuracy, ties to "
             "fewer steps; ties between lrs go to the smaller lr")


def variant(recipe: Recipe, *, lr: float, seed: int, pass_k_limit: int | None = None, overrides: dict | None = None,
            suffix: str = "") -> Recipe:
    """The recipe at this learning rate and seed (gradient and fitness, which seeds the search), testing the best snapshot by validation and
    sampling Pass@k on the trained tasks only. `overrides`: a recipe overlay (`overlay`)."""
    data = overlay(recipe.model_dump(mode="json"), overrides or {})
    data["gradient"].update(learning_rate=lr, seed=seed)
    data["fitness"]["seed"] = seed
    data["eval"].update(pass_k_limit=pass_k_limit, snapshots="best", pass_k_tasks=recipe.training_task_names())
    data["name"] = f"{data['name']}-lr{lr:g}-seed{seed}{suffix}"
    return recipe_from_dict(data, recipe._path)  # the same folder: relative data paths resolve as in the recipe


def overlay(data: dict, changes: dict) -> dict:
    """`data` (a recipe as plain data) with `changes` laid over it: a mapping is merged key by key into a mapping,
    anything else replaces; a dotted key ("gradient.vary") names a nested field."""
    out = dict(data)
    for key, value in changes.items():
        head, _, rest = key.partition(".")
        if rest:
            value = {rest: value}
        old = out.get(head)
        out[head] = overlay(old, value) if isinstance(value, dict) and isinstance(old, dict) else value
    return out


def best_trained(vals: list[dict]) -> dict:
    """The best adapter with at least one step (what an lr scores); ties: fewer steps."""
    return max((v for v in vals if v["steps"]), key=lambda v: (v["val"]["mean"], -v["steps"]))


def next_lr(scores: dict[float, float], max_lrs: int) -> float | None:
    """The learning rate to add so that the best is interior, or None (interior, or the grid is full)."""
    grid = sorted(scores)
    best = max(grid, key=lambda lr: (scores[lr], -lr))
    if len(grid) >= max_lrs or grid[0] < best < grid[-1]:
        return None
    return best / 2 if best == grid[0] else best * 2


def score_lr(recipe: Recipe, run_dir: Path) -> dict:
    """Train the baseline (with its snapshots) in `run_dir` and score every candidate on validation: the lr's
    grid entry, with what its training and validation cost."""
    from hyper_es.directions.collect import collect
    from hyper_es.directions.manifest import read_manifest
    from hyper_es.evaluate.final import evaluate_run
    from hyper_es.recipe.isolate import in_own_process

    collect(recipe, run_dir, baseline=True)
    vals = in_own_process(recipe, "validation", evaluate_run, run_dir, test=False)  # no engine left in the driver
    best = best_trained(vals)
    job = read_manifest(Path(run_dir) / DIRECTIONS_DIR / "baseline")
    logger.info("lr %g: best %s, validation %.4f", recipe.gradient.learning_rate, best["name"], best["val"]["mean"])
    return {"best": best["name"], "steps": best["steps"], "val": best["val"]["mean"],
            "candidates": {v["name"]: {"steps": v["steps"], "val": v["val"]["mean"]} for v in vals},
            "train": {"steps": job["optimizer_steps"], "tokens": job["tokens"], "wall_s": job["wall_seconds"]},
            "validation": {"tokens": sum(v["val"].get("tokens", 0) for v in vals),
                           "seconds": sum(v["val"].get("seconds", 0.0) for v in vals), "scored": len(vals)}}


def tune(out: Path, lrs: list[float], score: Callable[[float], dict], *, seed: int, max_lrs: int = 6) -> dict:
    """The bracketed grid (resumes; written to `out` after every lr). `score(lr)`: that lr's entry (`score_lr` on
    its recipe and folder)."""
    old = read_json(out, "delete it to redo the grid") if out.is_file() else {}
    grid = {float(k): v for k, v in old.get("lrs", {}).items()}  # a recorded lr is kept as recorded
    start = [float(v) for v in old.get("start", lrs)]  # a grid goes on from the start it was begun with
    todo = sorted(set(start) - set(grid))
    while True:
        for lr in todo:
            grid[lr] = score(lr)
            _write(out, seed, grid, None, start)
        add = next_lr({lr: g["val"] for lr, g in grid.items()}, max_lrs)
        if add is None:
            break
        todo = [add]
    chosen = max(grid, key=lambda lr: (grid[lr]["val"], -lr))
    return _write(out, seed, grid, chosen, start)


def _write(out: Path, seed: int, grid: dict, chosen: float | None, start: list[float]) -> dict:
    lrs = sorted(grid)
    result = {"seed": seed, "start": start, "chosen": chosen, "interior": chosen is not None and lrs[0] < chosen < lrs[-1],
              "lrs": {f"{lr:g}": grid[lr] for lr in lrs}, "criterion": CRITERION}
    if chosen is not None:  # the baseline row: the best candidate at the chosen lr, the base (step 0) included
        cands = grid[chosen]["candidates"]
        name = max(cands, key=lambda n: (cands[n]["val"], -cands[n]["steps"]))
        result["baseline_best"] = {"name": name, **cands[name]}
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out, result)
    return result
