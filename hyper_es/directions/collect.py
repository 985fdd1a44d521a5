"""Gradient stage: run the planned GRPO-LoRA jobs (directions/train.py, locally or as Ray tasks in
directions/ray_jobs.py); each finished job is one direction on disk, RUN/directions/<name>/ (PEFT adapter +
manifest.json). Directions the recipe names (`directions:`) are imported instead (directions/imported.py)."""

from __future__ import annotations

import logging
from pathlib import Path

from hyper_es.directions.difficulty import difficulty_path
from hyper_es.directions.imported import import_directions
from hyper_es.directions.jobs import plan_baseline, plan_directions
from hyper_es.directions.manifest import done_manifest
from hyper_es.directions.train import run_job
from hyper_es.errors import DataError, HyperESError
from hyper_es.recipe import Recipe, pin_run_partitions
from hyper_es.recipe.isolate import in_own_process
from hyper_es.rundir import DIRECTIONS_DIR, RECIPE_FILE

logger = logging.getLogger(__name__)


def prepare_run_dir(recipe: Recipe, run_dir: Path, *, comparison: bool = False) -> None:
    """Write the resolved recipe; on resume, refuse a run directory made from a different recipe. A run's file keeps
    the `compare` section it was first written with: a run does not read it, so an arm resumed under a later grid keeps
    the record of the recipe it ran; a comparison's own folder (`comparison`) records the new one."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / RECIPE_FILE
    text = recipe.to_yaml()
    if path.is_file():
        import yaml
        from pydantic import ValidationError

        try:
            old = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            old = f"{type(exc).__name__}"
        pin_run_partitions(old)  # a recipe.yaml from before `partition`: its generated splits were none
        if not isinstance(old, dict):
            raise DataError(f"{path}: damaged, not a recipe ({str(old)[:60]}); restore it, or delete it to resume "
                            f"with the recipe given now")
        new = recipe.model_dump(mode="json")

        def today(key: str):  # a section as today's schema reads it: a field added since, at its default, is no change
            try:
                return Recipe.model_validate({**new, key: old.get(key)}).model_dump(mode="json")[key]
            except (ValidationError, ValueError, TypeError):
                return old.get(key)

        changed = [k for k in ("model", "tasks", "gradient", "directions") if today(k) != new.get(k)]
        if changed:
            raise HyperESError(f"{run_dir} was started with a different recipe ({', '.join(changed)} differ); "
                               f"use a new --out or the recipe in {path}")
        if not comparison and "compare" in old:  # a run's record keeps the comparison section it was made with
            text = yaml.safe_dump({**new, "compare": today("compare")}, sort_keys=False)
    tmp = path.with_name(f".{RECIPE_FILE}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def collect(recipe: Recipe, run_dir: str | Path, *, baseline: bool = False, directions: bool = True,
            measure=None) -> list[Path]:
    """Run every planned job that has not finished yet; return the finished job folders in plan order. Jobs binned
    by difficulty need the base pass rates: `measure(recipe, run_dir)` writes them first (the pipeline and the CLI
    pass evaluate/pass_rates.measure_difficulty; the engines are a layer above this one). With `executor.isolate`
    on, each local job and the measurement run in a child process of their own (`measure` must then pickle)."""
    from hyper_es import models
    from hyper_es.models.identity import weights_hash

    run_dir = Path(run_dir)
    prepare_run_dir(recipe, run_dir)
    snapshots = recipe.gradient.directions_from == "snapshots"  # the directions come from the baseline's run
    given = directions and recipe.directions is not None  # the recipe names them: imported, not trained
    imported = import_directions(recipe, run_dir) if given else []
    plan = (plan_directions(recipe) if directions and not snapshots and not given else []) + (
        [plan_baseline(recipe)] if baseline or (directions and snapshots) else [])
    base_hash = weights_hash(models.resolve(recipe.model.name, revision=recipe.model.revision))
    done, pending = [], []
    for job in plan:
        folder = run_dir / DIRECTIONS_DIR / job.name
        manifest = done_manifest(folder)
        if manifest is not None:
            logger.info("job %s already finished (%d steps); skipping", job.name, manifest["optimizer_steps"])
        else:
            pending.append(job)
        done.append(folder)
    if any(j.by_difficulty for j in pending) and not difficulty_path(run_dir).is_file():
        if measure is None:
            raise HyperESError(f"{difficulty_path(run_dir)}: gradient.vary: difficulty needs the base pass rates; "
                               f"`hyper-es run` and `hyper-es collect` measure them")
        logger.info("measuring the base pass rates of the train rows (gradient.vary: difficulty)")
        in_own_process(recipe, "difficulty measurement", measure, run_dir)
    if pending and recipe.executor.kind == "ray":
        from hyper_es.directions.ray_jobs import run_jobs_on_ray

        run_jobs_on_ray(recipe, pending, run_dir, base_hash)
    for i, job in enumerate(pending if recipe.executor.kind == "local" else [], 1):
        logger.info("job %d/%d: %s", i, len(pending), job.name)
        in_own_process(recipe, f"job {job.name}", run_job, job, run_dir, base_hash)
    if directions and snapshots:
        from hyper_es.directions.snapshots import derive_directions

        done = derive_directions(recipe, run_dir) + (done if baseline else [])
    return imported + done


def prepare_search(recipe: Recipe, run_dir: str | Path) -> None:
    """Before a search: RUN/recipe.yaml written (or checked against), and the directions the recipe names imported
    (trained ones come from `collect`)."""
    prepare_run_dir(recipe, Path(run_dir))
    if recipe.directions is not None:
        import_directions(recipe, Path(run_dir))
