"""The GRPO-LoRA baseline, tuned with the care the search gets: a learning-rate grid on validation, extended until
its best learning rate is interior, snapshots every few steps for early stopping, and the base as the step-0
candidate. Per seed, every run resumes from its folder.

    python bench/baseline_grid.py --root ROOT/decide2 --seeds 0 1 2     # writes ROOT/decide2/seed<N>/lr_grid.json

A learning rate scores its best trained adapter by validation (a snapshot or the final; ties: fewer steps). The
grid starts at `--lrs` (a grid begun earlier goes on from its recorded start, and a recorded lr is kept as
recorded); while the best is its smallest (largest) learning rate, half that (twice that) is added, at most
`--max-lrs` in all. The baseline row of a seed is then the best candidate by validation at the chosen
learning rate, the base included (that is, no training is a candidate too).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hyper_es.io import read_json, write_json_atomic  # noqa: E402
from hyper_es.recipe import load_recipe, recipe_from_dict  # noqa: E402

logger = logging.getLogger("baseline_grid")
CRITERION = ("an lr scores its best trained adapter (snapshots and final) by greedy validation accuracy, ties to "
             "fewer steps; ties between lrs go to the smaller lr")


def variant(path: Path, *, lr: float, seed: int, pass_k_limit: int | None = None, overrides: dict | None = None,
            suffix: str = ""):
    """The recipe at this learning rate and seed (gradient and search), testing the best snapshot by validation."""
    data = load_recipe(path).model_dump(mode="json")
    for key, value in (overrides or {}).items():  # "section.field" or a whole "section"
        section, _, field = key.partition(".")
        if field:
            data[section][field] = value
        else:
            data[section] = value
    data["gradient"].update(learning_rate=lr, seed=seed)
    data["search"]["seed"] = seed
    trained = load_recipe(path).training_task_names()  # Pass@k is compared on the trained tasks only
    data["eval"].update(pass_k_limit=pass_k_limit, snapshots="best", pass_k_tasks=trained)  # test: the best snapshot
    data["name"] = f"{data['name']}-lr{lr:g}-seed{seed}{suffix}"
    return recipe_from_dict(data, path)  # same folder: relative data paths resolve as in the recipe


def lr_folder(root: Path, seed: int, lr: float) -> Path:
    return root / f"seed{seed}-lr{lr:g}"


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


def score_lr(recipe_path: Path, root: Path, seed: int, lr: float) -> dict:
    """Train the baseline at this lr (with its snapshots) and score every candidate on validation."""
    from hyper_es.directions.collect import collect
    from hyper_es.directions.manifest import read_manifest
    from hyper_es.evaluate.final import evaluate_run

    recipe = variant(recipe_path, lr=lr, seed=seed)
    run_dir = lr_folder(root, seed, lr)
    collect(recipe, run_dir, baseline=True)
    vals = evaluate_run(recipe, run_dir, test=False)
    best = best_trained(vals)
    job = read_manifest(run_dir / "directions" / "baseline")
    logger.info("seed %d lr %g: best %s, validation %.4f", seed, lr, best["name"], best["val"]["mean"])
    return {"best": best["name"], "steps": best["steps"], "val": best["val"]["mean"],
            "candidates": {v["name"]: {"steps": v["steps"], "val": v["val"]["mean"]} for v in vals},
            "train": {"steps": job["optimizer_steps"], "tokens": job["tokens"], "wall_s": job["wall_seconds"]},
            "validation": {"tokens": sum(v["val"].get("tokens", 0) for v in vals),
                           "seconds": sum(v["val"].get("seconds", 0.0) for v in vals), "scored": len(vals)}}


def tune(recipe_path: Path, root: Path, seed: int, lrs: list[float], max_lrs: int = 6) -> dict:
    """The bracketed grid of one seed (resumes; the result in ROOT/seed<N>/lr_grid.json)."""
    out = root / f"seed{seed}" / "lr_grid.json"
    old = read_json(out, "delete it to redo") if out.is_file() else {}
    grid = {float(k): v for k, v in old.get("lrs", {}).items()}  # a recorded lr is kept as recorded
    start = [float(v) for v in old.get("start", lrs)]  # a grid goes on from the start it was begun with
    todo = sorted(set(start) - set(grid))
    while True:
        for lr in todo:
            grid[lr] = score_lr(recipe_path, root, seed, lr)
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", type=Path, default=ROOT / "recipes/smollm2-135m.yaml")
    p.add_argument("--root", type=Path, required=True, help="run folders (resumable; keep outside the repo)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--lrs", type=float, nargs="+", default=[1.25e-4, 2.5e-4, 5e-4])
    p.add_argument("--max-lrs", type=int, default=6)
    args = p.parse_args()
    from hyper_es.progress import setup_logging

    setup_logging()
    for seed in args.seeds:
        r = tune(args.recipe, args.root, seed, args.lrs, args.max_lrs)
        print(f"seed {seed}: lr {r['chosen']:g} (interior: {r['interior']}), baseline row {r['baseline_best']}")
    print(f"command: python {' '.join(sys.argv)}")


if __name__ == "__main__":
    main()
