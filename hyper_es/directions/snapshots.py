"""Directions from one GRPO-LoRA run (`gradient.directions_from: snapshots`, ExPO-style): direction k is the
baseline run's update between its adapters at the directions' cumulative steps b(k-1) and b(k).

With LoRA factors, scale·(B_k A_k − B_{k-1} A_{k-1}) = scale·[B_k, −B_{k-1}] [A_k; A_{k-1}]: an exact LoRA of
rank 2r, written as a PEFT adapter folder with a manifest like any job's. So every direction shares the run's
subspace, the search, the exports and mergekit see ordinary adapters, and with all coefficients 1 (a linear
merge) the directions add up to the run's adapter at the last bound.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from hyper_es.directions.jobs import BASELINE, SNAPSHOTS, plan_directions
from hyper_es.directions.manifest import MANIFEST, done_manifest, read_manifest
from hyper_es.errors import DataError
from hyper_es.io import read_json, write_json_atomic
from hyper_es.rundir import ADAPTER_CONFIG, ADAPTER_WEIGHTS, DIRECTIONS_DIR

logger = logging.getLogger(__name__)


def _adapter_at(baseline: Path, step: int, final_step: int) -> Path:
    folder = baseline if step == final_step else baseline / SNAPSHOTS / f"step-{step}"
    if not (folder / ADAPTER_WEIGHTS).is_file():
        raise DataError(f"{folder}: no adapter for step {step}; delete {baseline} to retrain the baseline with "
                        f"snapshots at the directions' steps")
    return folder


def _increment(new: dict, old: dict | None) -> dict:
    """[B_new, −B_old] and [A_new; A_old] per module (the first direction is B_1 A_1 itself)."""
    out = {}
    for key, t in new.items():
        if old is None:
            out[key] = t
        elif ".lora_A." in key:
            out[key] = torch.cat([t, old[key]], dim=0).contiguous()
        else:
            out[key] = torch.cat([t, -old[key]], dim=1).contiguous()
    return out


def derive_directions(recipe, run_dir: Path) -> list[Path]:
    """Write RUN/directions/<name>/ for every planned direction from the finished baseline's snapshots."""
    run_dir = Path(run_dir)
    baseline = run_dir / DIRECTIONS_DIR / BASELINE
    manifest = read_manifest(baseline)
    if manifest is None:
        raise DataError(f"{baseline}: the baseline run has not finished; directions_from: snapshots needs it")
    cfg = read_json(baseline / ADAPTER_CONFIG, f"delete {baseline} to retrain the baseline")
    if cfg.get("rank_pattern") or cfg.get("alpha_pattern"):
        raise DataError(f"{baseline}: per-module LoRA ranks are not supported for snapshot directions")
    final, scale = manifest["optimizer_steps"], (cfg["lora_alpha"] / (cfg["r"] ** 0.5 if cfg.get("use_rslora")
                                                                       else cfg["r"]))
    tokens = dict(map(tuple, manifest.get("token_curve", [])))
    folders, prev, lo = [], None, 0
    for job in plan_directions(recipe):
        hi = lo + job.steps
        weights = load_file(str(_adapter_at(baseline, hi, final) / ADAPTER_WEIGHTS))
        folder = run_dir / DIRECTIONS_DIR / job.name
        if done_manifest(folder) is None:
            delta = _increment(weights, prev)
            rank = cfg["r"] * (1 if prev is None else 2)
            work = run_dir / DIRECTIONS_DIR / f".work-{job.name}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            save_file(delta, str(work / ADAPTER_WEIGHTS))
            # The same ΔW scale at rank 2r: alpha = scale·rank without rsLoRA.
            (work / ADAPTER_CONFIG).write_text(json.dumps({**cfg, "r": rank, "lora_alpha": scale * rank,
                                                           "use_rslora": False}, indent=1))
            write_json_atomic(work / MANIFEST, {
                **manifest, "name": job.name, "baseline": False, "job": {**manifest["job"], "name": job.name,
                                                                         "steps": job.steps, "baseline": False},
                "derived_from": {"run": BASELINE, "steps": [lo, hi]}, "optimizer_steps": job.steps,
                "completions": manifest["completions"] * job.steps // final,
                "prompts": manifest["prompts"] * job.steps // final,
                "tokens": int(tokens.get(hi, 0) - tokens.get(lo, 0)),
                "reward_curve": [[s, r] for s, r in manifest["reward_curve"] if lo < s <= hi],
                "wall_seconds": manifest["wall_seconds"] * job.steps / final,
            })
            work.rename(folder)
            logger.info("direction %s = baseline steps %d..%d (rank %d)", job.name, lo, hi, rank)
        folders.append(folder)
        prev, lo = weights, hi
    return folders
