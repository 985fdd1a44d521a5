"""`adapter-further`: the given adapter best on the main run's validation, trained further by GRPO-LoRA on the
target (its baseline job started from base + that adapter's ΔW) with grpo-equal-compute's budget and settings.
Composition's control for "keep training the best adapter you have" (issue 44)."""

from __future__ import annotations

from pathlib import Path

from hyper_es.errors import DataError
from hyper_es.io import read_json, write_json_atomic
from hyper_es.recipe import Recipe
from hyper_es.rundir import EVAL_DIR

FURTHER_FILE = "further.json"


def given_names(recipe: Recipe) -> list[str]:
    """The names of the recipe's given adapters, in its order."""
    d = recipe.directions
    return [d.ref(i)[1] for i in range(len(d.adapters))] if d and d.adapters else []


def best_adapter(main: Path, recipe: Recipe) -> dict:
    """{"adapter": the given adapter best alone on the main run's validation (ties: the first named), "val": each
    one's score}: the choice, made without looking at test."""
    scores = {}
    for name in given_names(recipe):
        path = Path(main) / EVAL_DIR / "val" / f"{name}.json"
        if not path.is_file():
            raise DataError(f"{path}: the main run scored no validation for adapter '{name}'; re-run its evaluation "
                            f"(`hyper-es evaluate`)")
        scores[name] = float(read_json(path, "delete it to score the adapter again")["mean"])
    if not scores:
        raise DataError("adapter-further needs given adapters (directions.adapters)")
    best = max(scores, key=lambda n: (scores[n], -list(scores).index(n)))
    return {"adapter": best, "val": scores}


def further_changes(choice: dict, plan: dict) -> dict:
    """The arm's overlay on the compared recipe: grpo-equal-compute's (the equal plan's steps, accumulated batches
    and snapshots, no search, merge or gradient-fit rows), the baseline started from the chosen adapter."""
    from hyper_es.compare.equal import equal_overlay
    from hyper_es.compare.grid import overlay

    return overlay(equal_overlay(plan), {"gradient": {"baseline_start": choice["adapter"]}})


def choose(main: Path, folder: Path, recipe: Recipe) -> dict:
    """The choice, made once and kept in `folder`/further.json (a resumed arm trains the same adapter further)."""
    path = Path(folder) / FURTHER_FILE
    if path.is_file():
        return read_json(path, "delete the folder to choose again")
    choice = best_adapter(main, recipe)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, choice)
    return choice
