"""The gradient stage on Ray: one task per unfinished job, with the recipe's per-job resources. A job writes its
adapter to the shared run folder exactly as it does locally (so finished jobs are skipped on resume, and the
adapters are the same bitwise); a task whose worker dies is retried, resuming from the job's TRL checkpoint."""

from __future__ import annotations

import logging
from pathlib import Path

logger = logging.getLogger(__name__)


def _train(data: dict, path: str, job, run_dir: str, base_hash: str) -> str:
    from hyper_es.directions.train import run_job
    from hyper_es.recipe.isolate import call_with_recipe

    return str(call_with_recipe(run_job, data, path, job, Path(run_dir), base_hash))


def run_jobs_on_ray(recipe, jobs: list, run_dir: Path, base_hash: str) -> list[Path]:
    """Train `jobs` (JobSpecs) as Ray tasks; returns their adapter folders in job order. A job that fails raises
    its own error (Ray re-raises the worker's exception as an instance of its class)."""
    from hyper_es.distributed.cluster import ray_cluster, require_gpus, worker_env
    from hyper_es.recipe.isolate import portable

    ex = recipe.executor
    require_gpus("executor.job.num_gpus", ex.job.num_gpus, "gradient job")  # a job trains on CUDA when it sees it
    with ray_cluster(ex, recipe.threads) as ray:
        task = ray.remote(num_cpus=ex.job.num_cpus, num_gpus=ex.job.num_gpus, max_retries=ex.max_retries,
                          runtime_env=worker_env(recipe.threads))(_train)
        data, path = portable(recipe)
        refs = [task.remote(data, path, job, str(run_dir), base_hash) for job in jobs]
        logger.info("gradient stage on Ray: %d jobs submitted (%s CPU, %s GPU each)", len(jobs), ex.job.num_cpus,
                    ex.job.num_gpus)
        return [Path(p) for p in ray.get(refs)]
