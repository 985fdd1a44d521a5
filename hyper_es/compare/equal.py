"""`grpo-equal-compute`: the GRPO-LoRA baseline given the main Hyper-ES row's budget, its generated tokens or its
wall time, spent on more completions per step at the tuned lr, steps and snapshots."""

from __future__ import annotations

import math
from pathlib import Path

from hyper_es.io import read_json, write_json_atomic
from hyper_es.rundir import DIRECTIONS_DIR, REPORT_FILE


def equal_plan(main: Path, baseline_every: int, max_batches: int | None = None, budget: str = "tokens") -> dict:
    """How the baseline gets the main Hyper-ES row's cost: its total generated tokens (`budget` "tokens") or its total
    wall time ("seconds"), at the baseline's own tokens and seconds per batch. The extra compute goes into each step
    (accumulated batches: more completions per step), not into more steps: the baseline's steps, lr and snapshots
    are the tuned ones, and its best snapshot by validation (an early stop) stays as fine-grained. Batches are rounded
    up, so the control gets at least the budget; at most `max_batches` (then it is `capped`, and the plan says so).
    `micro`: the baseline's micro-batches a batch (its `accumulation_steps`), which each planned batch keeps."""
    row, job = hyper_es_row(main), baseline_job(main)
    steps = job["optimizer_steps"]
    per_step, per_step_s = job["tokens"] / steps, job["wall_seconds"] / steps
    equal, equal_s = math.ceil(row["tokens"] / per_step), math.ceil(row["wall_s"] / per_step_s)  # batches
    batches = min(equal if budget == "tokens" else equal_s, max_batches or equal)
    accumulation = max(1, math.ceil(batches / steps))
    return {"budget": budget, "budget_tokens": row["tokens"], "budget_s": row["wall_s"],
            "baseline_tokens_per_step": per_step, "baseline_s_per_step": per_step_s, "steps": steps,
            "accumulation": accumulation, "batches": steps * accumulation, "snapshot_every": baseline_every,
            "equal_steps": equal, "equal_wall_steps": equal_s, "capped": steps * accumulation < equal,
            "micro": micro(job)}


def planned(path: Path, main: Path, baseline_every: int, max_batches: int | None = None,
            budget: str = "tokens") -> dict:
    """The plan kept at `path`, made once from `main` (`equal_plan`); a plan kept before it recorded `micro` takes
    it from main's baseline."""
    if Path(path).is_file():
        plan = read_json(path, "delete it to plan it again")
        return plan if "micro" in plan else {**plan, "micro": micro(baseline_job(main))}
    plan = equal_plan(main, baseline_every, max_batches, budget)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, plan)
    return plan


def baseline_job(main: Path) -> dict:
    from hyper_es.directions.manifest import read_manifest

    return read_manifest(Path(main) / DIRECTIONS_DIR / "baseline")


def micro(job: dict) -> int:
    """A baseline job's micro-batches a batch (1 in a manifest from before its gradient settings were recorded)."""
    return int((job.get("grpo") or {}).get("accumulation_steps", 1))


def hyper_es_row(main: Path) -> dict:
    """The main run's Hyper-ES row (its report): the budget the equal-compute controls and an ES arm get."""
    report = read_json(Path(main) / REPORT_FILE, "re-run the main run")
    return next(r for r in report["rows"] if r["name"] == "hyper-es")


def equal_overlay(plan: dict) -> dict:
    """The control's recipe overlay: the baseline alone at the plan's steps, accumulated batches and snapshots, with
    a checkpoint after every step (a step is long), and no search (so no scale scan, merge or gradient-fit rows).
    Each of its batches keeps the baseline's micro-batches (the plan's `micro`)."""
    return {"gradient": {"directions_from": "jobs", "baseline_steps": plan["steps"], "checkpoint_every": 1,
                         "accumulation_steps": plan["accumulation"] * plan["micro"],
                         "baseline_snapshot_every": plan["snapshot_every"]},
            "search": {"scale_scan": None}, "eval": {"merges": []}, "gradfit": None}
