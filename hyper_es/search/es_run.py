"""`hyper-es es`: full-parameter ES on the recipe's tasks, with the search's fitness rows, reward and guard.

Each iteration scores `es.population` members θ + sᵢσ·ε(seedᵢ) on the fitness minibatch (the search's
`fitness_set`, `minibatch`, `reward`), normalises the rewards and updates θ in the engine's fp32 master. The history
(RUN/es/history.jsonl: seeds, signs, rewards, z, σ, α per iteration) is the checkpoint: resuming replays it onto the
base weights, bitwise, and goes on. The start's validation score is kept (RUN/es/start.json) so the guard can compare
θ_T with θ_0 paired without keeping two copies of the model: θ_T is kept only if it is strictly better.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from pathlib import Path

import numpy as np

from hyper_es import rewards
from hyper_es.cost import Cost, stage_cost
from hyper_es.errors import DataError
from hyper_es.es.history import START, finished
from hyper_es.io import read_json, write_json_atomic
from hyper_es.recipe import Recipe
from hyper_es.recipe.isolate import in_own_process
from hyper_es.fitness import Score, Scorer, fitness_splits
from hyper_es.search.es_strategy import ESStrategy
from hyper_es.search.loop import drive, score_generation
from hyper_es.search.coevolve import coevolution, proposed
from hyper_es.search.start import guard_decision
from hyper_es.tasks.prompt_genome import PROMPT_FILE
from hyper_es.tasks.proposals import proposals_spent
from hyper_es.rundir import ES_CONFIG, ES_DIR, RESULT_FILE

logger = logging.getLogger(__name__)
# the fitness settings ES's history depends on (recorded in RUN/es/config.json; the guard and re-scores are not)
HISTORY_FITNESS = ("tasks", "fitness_set", "minibatch", "reward", "samples", "temperature", "seed", "val_size")
def diversity(scores: list[Score]) -> dict:
    """How the population's answers spread on one fitness minibatch: distinct final answers per prompt (no answer
    counts as one), the share of prompts some member solves, and the members' mean share."""
    answers = [sc.answers for sc in scores]
    solved = np.array([sc.per_row for sc in scores]) >= 1.0
    distinct = [len({a[j] for a in answers}) for j in range(len(answers[0]))] if answers and answers[0] else [0]
    return {"distinct": float(np.mean(distinct)), "solved_any": float(solved.any(axis=0).mean()),
            "solved_mean": float(solved.mean())}


def es_search(recipe: Recipe, run_dir: str | Path, engine, tok, scorer=None) -> dict:
    """Run (or resume) ES with a resident ES engine (set_genome(Member | None), update, weights); returns the
    result written to RUN/es/result.json (`kept_iterations`: how many of the history's updates the kept weights
    have: the iterations run, or 0 when the guard keeps θ_0). The engine ends holding θ_T; a finished run (its
    result.json covers the whole history) returns that result and leaves the engine as it is."""
    out = Path(run_dir) / ES_DIR
    out.mkdir(parents=True, exist_ok=True)
    c, s = recipe.es, recipe.fitness
    if recipe.coevolve and recipe.coevolve.weights == "fixed":
        raise DataError("coevolve.weights: fixed (the prompt-only ablation) runs in the Hyper-ES search, where the "
                        "weights stay at its start; ES co-evolves with weights: search")
    done = finished(out, c.population)
    if done is not None:
        return done
    tasks, pool, val = fitness_splits(recipe)
    fit_reward = rewards.get(s.reward) if s.reward else None
    scorer = scorer or Scorer(engine, tok, tasks)  # an engine pool is its own scorer
    scorer.prepare(pool, val)
    start_path = out / "start.json"
    if start_path.is_file():
        start = Score(**{k: v for k, v in read_json(start_path, "delete it to score the start again").items()})
    else:
        start = scorer.score(None, val)
        write_json_atomic(start_path, start.__dict__)
    strategy = ESStrategy(c, out)
    co = coevolution(recipe, strategy, tasks) if recipe.coevolve else None  # prompts paired with the members
    t0 = time.perf_counter()

    def log(rec: dict) -> None:
        logger.info("ES iteration %d: mean %.3f best %.3f sigma %.2g, %.2f distinct answers per prompt",
                    rec["iteration"] + 1, rec["mean"], rec["best"], rec["sigma"], rec["diversity"]["distinct"])
        if "actors" in rec:
            logger.info("engine actors: %s", ", ".join(f"#{a['actor']} {a['candidates']} members {a['per_s']:.2f}/s"
                                                        for a in rec["actors"]))

    drive(co or strategy, score_generation(scorer, pool, s, reward=fit_reward, answers=True,
                                           extra=lambda members, scores, _: {"diversity": diversity(scores)},
                                           split=co.split if co else None),
          update=engine.update, on_record=log)
    history, spent, t_final = strategy.history, strategy.spent, time.perf_counter()
    genes = co.population[0] if co else None  # the last generation's best prompt by fitness (elite first)
    final = scorer.score(None, val, tasks=co.tasks_for(genes) if co else None)
    write_json_atomic(out / "final.json", final.__dict__)  # θ_T on the validation rows (paired with start.json)
    decision = guard_decision(start, final, what="ES weights" + (" with their prompt" if co else ""))
    if not s.guard:
        decision["kept"] = "search (fitness.guard: false)"
    kept = len(history) if decision["kept"].startswith("search") else 0  # θ_0 + the first `kept` updates
    if co:  # the prompt the es+prompt row is scored with: θ_0 keeps the tasks' own
        genes = genes if kept else co.start()
        write_json_atomic(out / PROMPT_FILE, {"genes": co.to_json(genes), "prompt": co.describe(genes),
                                              "exported": co.exported(genes)})
    proposals = proposals_spent(run_dir) if co else (0, 0.0)
    result = {"iterations": len(history), "kept_iterations": kept, "guard": decision,
              "val": {"start": start.reward, "es": final.reward},
              "cost": stage_cost({"start": Cost(select_tokens=start.tokens),  # θ_0 on validation (the guard's)
                                  "iterations": Cost(search_tokens=spent, seconds=t_final - t0),
                                  "guard": Cost(select_tokens=final.tokens, seconds=time.perf_counter() - t_final),
                                  "proposals": Cost(search_tokens=proposals[0], seconds=proposals[1])})}
    write_json_atomic(out / RESULT_FILE, result)
    return result


def run_es(recipe: Recipe, run_dir: str | Path, *, backend: str | None = None) -> dict:
    """`hyper-es es`: ES (`es_stage`), then, with `es.then: grpo`, the GRPO-LoRA job on ES's weights (RUN/es/grpo/);
    each in a child process of its own with `executor.isolate` on (the job's trainer starts on an empty card)."""
    result = in_own_process(recipe, "full-parameter ES", es_stage, Path(run_dir), backend=backend)
    if recipe.es.then == "grpo":  # ES → GRPO-LoRA, on the weights ES kept
        in_own_process(recipe, "ES → GRPO-LoRA job", es_then_grpo, Path(run_dir))
    return result


def es_stage(recipe: Recipe, run_dir: str | Path, *, backend: str | None = None) -> dict:
    """Build the resident ES engine, run (or resume) ES in RUN/es/, close the engine. A run folder started with other
    ES or fitness settings is refused (its history would not replay to the same weights)."""
    from hyper_es.engine import es_engine

    out = Path(run_dir) / ES_DIR
    out.mkdir(parents=True, exist_ok=True)
    config = {"model": recipe.model.model_dump(mode="json"), "es": recipe.es.model_dump(mode="json"),
              "fitness": recipe.fitness.model_dump(mode="json", include=set(HISTORY_FITNESS)),
              "dtype": recipe.eval.dtype,
              **({"lora": recipe.gradient.lora.model_dump(mode="json")} if recipe.es.scope == "lora" else {})}
    config["es"].pop("then")  # what follows ES does not change its history
    path = out / ES_CONFIG
    if path.is_file():
        old = read_json(path, "delete RUN/es to restart ES")
        old.get("es", {}).pop("then", None)
        old.get("es", {}).setdefault("noise", "generator")  # recorded before the table: generated noise
        changed = [k for k in config if old.get(k) != json.loads(json.dumps(config[k]))]
        if changed:
            raise DataError(f"{path}: this ES run was started with other settings ({', '.join(changed)} differ); "
                            f"use a new --out, or the recipe it was started with")
    else:
        write_json_atomic(path, config)
    start_file = None
    if recipe.es.start != "base":  # GRPO→ES, Hyper-ES→ES: the start's update, fixed once on disk
        start_file = out / START
        if not start_file.is_file():
            from safetensors.torch import save_file

            from hyper_es.rows import row_update

            save_file({n: t.contiguous() for n, t in row_update(run_dir, recipe.es.start, recipe).items()},
                      str(start_file))
    result = finished(out, recipe.es.population)  # no engine for a finished run
    if result is None:  # co-evolution's template rewrites, if asked for: before the engine
        recipe = proposed(recipe, run_dir, backend or recipe.eval.backend)
    with contextlib.ExitStack() as stack:
        if result is None and recipe.executor.kind == "ray":  # members spread over a pool of ES engines (updates go to all)
            from hyper_es.fitness.pool import engine_pool

            engine = engine_pool(stack, recipe, es_engine, backend=backend or recipe.eval.backend,
                                 start_file=None if start_file is None else str(start_file))
            result = es_search(recipe, run_dir, engine, None, scorer=engine)
        elif result is None:
            engine, tok = es_engine(recipe, backend or recipe.eval.backend, start_file)
            stack.callback(engine.close)
            result = es_search(recipe, run_dir, engine, tok)
    return result


def es_then_grpo(recipe, run_dir: str | Path) -> Path:
    """ES → GRPO-LoRA: train (or skip, once finished) a GRPO-LoRA job with the baseline's settings on base + ES's
    kept update, in RUN/es/grpo/; returns its adapter folder."""
    from dataclasses import replace

    from hyper_es import models
    from hyper_es.directions.jobs import plan_baseline
    from hyper_es.directions.manifest import done_manifest
    from hyper_es.directions.train import run_job
    from hyper_es.es.delta import es_delta
    from hyper_es.es.history import GRPO_JOB, grpo_folder
    from hyper_es.models.identity import weights_hash

    folder = grpo_folder(run_dir)
    if done_manifest(folder) is not None:
        return folder
    base = models.resolve(recipe.model.name, revision=recipe.model.revision)
    delta, _ = es_delta(run_dir, base)
    job = replace(plan_baseline(recipe), name=GRPO_JOB)
    return run_job(recipe, job, Path(run_dir), weights_hash(base), start=delta, dest=folder)
