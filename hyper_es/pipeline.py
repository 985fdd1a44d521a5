"""`hyper-es run`: collect (K directions + the GRPO-LoRA baseline) → search → final evaluation → report; with
`method: es`, the baseline → full-parameter ES → final evaluation → report.

Every stage resumes from what is on disk: finished jobs are skipped, the search continues from its checkpoint
(and is not re-run once `search/result.json` exists), finished evaluation rows are skipped. With `executor.isolate`
on, each GRPO job (and the difficulty measurement), the search or ES, and the final evaluation with the report run
in a child process of their own, so each starts on an empty card; the driver itself holds no engine or trainer.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path

from hyper_es.recipe import Recipe, recipe_from_dict
from hyper_es.report.final import evaluate_and_report  # noqa: F401  (the stage, here beside the others)
from hyper_es.recipe.isolate import in_own_process
from hyper_es.rundir import GEOMETRY_FILE, GRADFIT_DIR, RESULT_FILE, SEARCH_DIR

logger = logging.getLogger(__name__)


def quick(recipe: Recipe) -> Recipe:
    """The recipe scaled down for a first look (minutes on a CPU): 2 directions of 1 step on batches of 2 prompts
    (the baseline keeps its rule, steps / 0.9), a 2-generation search of 4 candidates on 8 fitness prompts per task
    without the scale scan, and the final evaluation on the trained and searched tasks only (not the transfer sets)
    with 10 test problems per task, Pass@k up to k = 4 on the first 5, and of the baseline's snapshots only the best
    by validation tested. Completions are capped at the gradient stage's length (`max_completion_length`)
    everywhere. It runs alone, so torch takes every core (`threads`)."""
    import os

    data = recipe.model_dump(mode="json")
    data["threads"] = max(data["threads"], os.cpu_count() or 1)
    g, s, f, e = data["gradient"], data["search"], data["fitness"], data["eval"]
    g.update(directions=min(g["directions"], 2), steps=1, jobs=g["jobs"][:2], baseline_steps=None,
             batch_size=min(g["batch_size"], 2 * g["num_generations"]), accumulation_steps=1)
    g["baseline_snapshot_every"] = 4 if g["baseline_snapshot_every"] else 0
    s.update(popsize=4, max_generations=2, max_evals=None, wall_clock_s=None, scale_scan=None)
    f.update(minibatch=min(f["minibatch"], 8), val_size=min(f["val_size"], 8), rescore_top=1)
    e.update(limit=min(e["limit"] or 10, 10), k=[k for k in e["k"] if k <= 4] or [1], n=None,
             pass_k_limit=min(e["pass_k_limit"] or 5, 5), snapshots="best")
    if max(e["k"]) < 4 and max(recipe.eval.k) >= 4:
        e["k"].append(4)
    used = set(g["tasks"] or []) | set(f["tasks"] or [])
    data["tasks"] = [{**t, "max_tokens": min(t["max_tokens"], g["max_completion_length"])} for t in data["tasks"]
                     if t["name"] in used or t.get("train") or t.get("val")]
    data["name"] = f"{data['name']}-quick"
    return recipe_from_dict(data, recipe._path or "<recipe>")


def run(recipe: Recipe, run_dir: str | Path, *, backend: str | None = None) -> dict:
    """The whole pipeline; returns the report (also written to RUN/report.json and RUN/report.md)."""
    from hyper_es.directions import DirectionSet
    from hyper_es.directions.collect import collect
    from hyper_es.evaluate.pass_rates import measure_difficulty
    from hyper_es.io import write_json_atomic
    from hyper_es.search.run import search

    run_dir = Path(run_dir)
    if recipe.method == "es":
        return run_es_method(recipe, run_dir, backend=backend)
    given = recipe.directions
    baseline = given is None or given.baseline
    logger.info("stage 1/4: gradient stage (%s%s)", "the recipe's directions" if given else
                f"{recipe.gradient.directions} directions", " + GRPO-LoRA baseline" if baseline else "")
    collect(recipe, run_dir, baseline=baseline, measure=partial(measure_difficulty, backend=backend))  # isolates jobs
    if not (run_dir / GEOMETRY_FILE).is_file():
        write_json_atomic(run_dir / GEOMETRY_FILE, DirectionSet.from_run(run_dir).geometry())
    if (run_dir / SEARCH_DIR / RESULT_FILE).is_file():
        logger.info("stage 2/4: search already finished (search/result.json)")
    else:
        logger.info("stage 2/4: CMA-ES search")
        in_own_process(recipe, "search", search, run_dir, backend=backend, score_test=False)  # stage 3: every row
    if recipe.gradfit and not (run_dir / GRADFIT_DIR / RESULT_FILE).is_file():
        from hyper_es.search.grad_fit import fit

        logger.info("stage 2/4: the gradient-fitted control (gradfit)")
        in_own_process(recipe, "gradient fit", fit, run_dir)
    return in_own_process(recipe, "final evaluation and report", evaluate_and_report, run_dir, backend)


def run_es_method(recipe: Recipe, run_dir: Path, *, backend: str | None = None) -> dict:
    """`method: es`: the GRPO-LoRA baseline → full-parameter ES (from the base or the baseline; then GRPO-LoRA on
    ES's weights with `es.then: grpo`) → final evaluation → report."""
    from hyper_es.directions.collect import collect
    from hyper_es.search.es_run import run_es

    logger.info("stage 1/4: gradient stage (the GRPO-LoRA baseline)")
    collect(recipe, run_dir, baseline=True, directions=False)
    logger.info("stage 2/4: full-parameter ES (a finished run is kept as it is)")
    run_es(recipe, run_dir, backend=backend)  # ES, and GRPO-LoRA after it, each in its own process when isolated
    return in_own_process(recipe, "final evaluation and report", evaluate_and_report, run_dir, backend)
