"""Difficulty bins for `gradient.vary: difficulty`: the base model's pass rate on the first `difficulty_rows` train
rows of each task (measured once, by evaluate/pass_rates.py, into RUN/directions/difficulty.json), and the k-th of
K bins of those rows ordered by it, hardest first."""

from __future__ import annotations

import hashlib
from pathlib import Path

from hyper_es.errors import DataError
from hyper_es.io import read_json
from hyper_es.rundir import DIRECTIONS_DIR

DIFFICULTY = "difficulty.json"  # in RUN/directions/


def difficulty_path(run_dir: Path) -> Path:
    return Path(run_dir) / DIRECTIONS_DIR / DIFFICULTY


def needs_difficulty(recipe) -> bool:
    return recipe.gradient.directions_from == "jobs" and "difficulty" in recipe.gradient.vary


def difficulty_settings(recipe) -> dict:
    """What a measurement must match to be reused: the model, the rows and the sampling."""
    g = recipe.gradient
    return {"model": recipe.model.name, "revision": recipe.model.revision, "rows": g.difficulty_rows,
            "samples": g.difficulty_samples, "temperature": g.temperature, "max_tokens": g.max_completion_length,
            "seed": g.seed, "tasks": recipe.training_task_names()}


def read_difficulty(run_dir: Path, recipe) -> dict:
    """The measured pass rates {task: {row id: rate}}; refuses a missing file or one measured with other settings."""
    path = difficulty_path(run_dir)
    fix = "delete it to measure again (`hyper-es run` and `hyper-es collect` measure it before the jobs)"
    if not path.is_file():
        raise DataError(f"{path}: missing; gradient.vary: difficulty needs the base pass rates, which `hyper-es run` "
                        f"and `hyper-es collect` measure before the jobs")
    data = read_json(path, fix)
    want = difficulty_settings(recipe)
    if not isinstance(data, dict) or data.get("settings") != want or not isinstance(data.get("pass_rate"), dict):
        raise DataError(f"{path}: settings: measured with {data.get('settings') if isinstance(data, dict) else data}, "
                        f"expected {want}; {fix}")
    return data["pass_rate"]


def _tie_break(row_id: str) -> str:
    return hashlib.sha256(row_id.encode()).hexdigest()


def difficulty_bin(rows: list[dict], pass_rates: dict, task: str, k: int, num_bins: int) -> list[dict]:
    """Bin k of num_bins (0: the hardest) of the measured rows, ordered by pass rate (ties: by a hash of the id),
    in contiguous bins whose sizes differ by at most one."""
    rates = (pass_rates or {}).get(task)
    if not isinstance(rates, dict):
        raise DataError(f"{DIFFICULTY}: pass_rate: no pass rates for task '{task}'")
    measured = [r for r in rows if r["id"] in rates]
    if len(measured) != len(rates):
        raise DataError(f"{DIFFICULTY}: pass_rate.{task}: {len(rates) - len(measured)} row ids are not in the train "
                        f"split; delete it to measure again")
    if len(measured) < num_bins:
        raise DataError(f"{DIFFICULTY}: pass_rate.{task}: {len(measured)} rows cannot make {num_bins} bins; raise "
                        f"gradient.difficulty_rows")
    ordered = sorted(measured, key=lambda r: (float(rates[r["id"]]), _tie_break(r["id"])))
    size, extra = divmod(len(ordered), num_bins)
    start = k * size + min(k, extra)
    return ordered[start : start + size + (k < extra)]
