"""`hyper-es search`: CMA-ES over the genome, fitness = mean verified reward of greedy generations.

Optionally, a scale scan picks the start (search/start.py). Each generation draws one minibatch of train prompts
(seeded by the generation, or one fixed draw), seen by every candidate, scored with the task's reward or
`search.reward`. The best `rescore_top` candidates of each generation are re-scored on the validation split; the
final genome is the best by validation, if it beats x0 there (the guard), else x0. It is reported once on the
test split next to the base (all coefficients 0), the uniform merge and x0.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from pathlib import Path

import numpy as np

from hyper_es.directions import DirectionSet
from hyper_es.directions.collect import prepare_search
from hyper_es.engine import inplace_engine
from hyper_es.errors import DataError
from hyper_es import models, rewards
from hyper_es.fitness import Score, Scorer, fitness_splits
from hyper_es.io import read_json, write_json_atomic
from hyper_es.merging import recipe_genome
from hyper_es.recipe import Recipe
from hyper_es.search.driver import CHECKPOINT, Budget, CMASearch, FixedWeights
from hyper_es.search.coevolve import coevolution, proposed
from hyper_es.search.loop import drive, generation_scores, score_generation
from hyper_es.search.start import guard, scale_scan
from hyper_es.search.tracking import Tracker
from hyper_es.tasks.prompt_genome import PROMPT_FILE

logger = logging.getLogger(__name__)


def cma_popsize(n: int) -> int:
    """pycma's default population for n dimensions (4 + ⌊3 ln n⌋): a LoRA engine's batch of adapters."""
    return 4 + int(3 * math.log(n))


def search(recipe: Recipe, run_dir: str | Path, *, backend: str | None = None, score_test: bool = True,
           reward=None) -> dict:
    """Run (or resume) the search in RUN/search/; returns the result written to RUN/search/result.json.

    `score_test=False` leaves the test split to a later evaluation (`hyper-es run` evaluates every row there).
    `reward`: a callable `(completion, reference) -> float` in place of every searched task's own (fitness,
    validation and test; `search.reward` still replaces it for fitness), in this process (the Python API's)."""
    run_dir = Path(run_dir)
    out = run_dir / "search"
    backend = backend or recipe.eval.backend
    prepare_search(recipe, run_dir)  # RUN/recipe.yaml, and the directions the recipe names
    recipe = proposed(recipe, run_dir, backend)  # co-evolution's template rewrites, if asked for: before the engine
    s, m = recipe.search, recipe.merge
    base = models.resolve(recipe.model.name, revision=recipe.model.revision)
    ds = DirectionSet.from_run(run_dir)
    if Path(ds.base_path).resolve() != Path(base).resolve():
        raise DataError(f"{run_dir}/directions: trained on '{ds.base}', but the recipe's model.name is "
                        f"'{recipe.model.name}'")
    zero = ds.zero_directions()
    if len(zero) == len(ds):
        raise DataError(f"{run_dir}/directions: every direction is 0 in every tensor, so no merge of them changes the "
                        f"model (their jobs' rewards never varied: GRPO's advantages were 0); train them with a "
                        f"reward the base can earn (gradient.rewards), or name other adapters")
    genome, settings = recipe_genome(recipe, ds)
    if zero:
        logger.warning("direction%s %s: ΔW is 0 in every tensor (its training rewards never varied, so GRPO's "
                       "advantages were 0), so %d of the "
                       "genome's %d genes cannot change the model", "s" * (len(zero) > 1), ", ".join(zero),
                       sum(k[1] in zero for k in genome.keys), genome.size)
    tasks, fit_pool, val = fitness_splits(recipe)
    if reward is not None:
        if recipe.executor.kind == "ray":
            raise DataError("a reward callable scores in this process only; with executor.kind: ray name a reward "
                            "the actors can import ('package.module:function') in the tasks")
        for t in tasks:
            t.reward = rewards.safe_reward(reward, name=getattr(reward, "__qualname__", None))
    test = {t.name: t.rows("test") for t in tasks if t.cfg.test is not None and score_test}

    if (out / CHECKPOINT).is_file():
        read_json(out / CHECKPOINT, "delete it (and generations.jsonl) to restart the search")  # before an engine
    lo, hi = genome.lower_upper()
    x0, sigma0 = genome.initial(s.x0, m.density), s.sigma0
    fit_reward = rewards.get(s.reward) if s.reward else None

    stack = contextlib.ExitStack()
    if recipe.executor.kind == "ray":  # a pool of resident engines, one per actor (the stack closes it)
        from hyper_es.fitness.pool import engine_pool

        from hyper_es.engine import run_engine

        engine = scorer = engine_pool(stack, recipe, run_engine, run_dir=str(run_dir), backend=backend,
                                      workdir=str(out / "engine"), seed=s.seed, fused=s.compile_merge,
                                      batch=s.popsize or cma_popsize(genome.size))  # LoRA slots: as a local engine
    else:
        engine, tok = inplace_engine(recipe, backend, ds, genome, settings, out / "engine", seed=s.seed,
                                     fused=s.compile_merge, batch=s.popsize or cma_popsize(genome.size))
        scorer = Scorer(engine, tok, tasks)
    tracker = None
    try:
        scorer.prepare(fit_pool, val, test)

        def fit(x) -> Score:  # one candidate on generation 0's minibatch (the scale scan's)
            return generation_scores(scorer, fit_pool, s, [x], 0, reward=fit_reward)[0]

        scan = scale_scan(fit, genome, x0, s.scale_scan, out) if s.scale_scan else None
        if scan:
            x0, sigma0 = np.asarray(scan["x0"]), scan["sigma0"]
        budget, rescore_top = Budget(s.max_generations, s.max_evals, s.wall_clock_s), s.rescore_top
        if recipe.coevolve and recipe.coevolve.weights == "fixed":  # prompt-only: x0 throughout, as many scorings
            c, popsize = recipe.coevolve, s.popsize or cma_popsize(genome.size)
            vectors = math.ceil(c.population / min(c.pairs, c.population))  # every prompt met once a generation
            budget.max_generations = math.ceil(popsize * s.max_generations / vectors)
            # as many validation re-scores in all as the search makes: fewer per (more, smaller) generation
            rescore_top = max(1, round(s.rescore_top * s.max_generations / budget.max_generations))
            driver = FixedWeights(x0, vectors=vectors, budget=budget, out=out, seed=s.seed)
        else:
            driver = CMASearch(x0, sigma0, lower=lo, upper=hi, popsize=s.popsize, seed=s.seed, budget=budget,
                               out=out)
        co = coevolution(recipe, driver, tasks) if recipe.coevolve else None  # prompts paired with the vectors
        start = co.start() if co else None
        per_candidate = min(recipe.coevolve.pairs, recipe.coevolve.population) if co else 1  # scorings of a vector
        tracker = Tracker(out, kind=s.tracking,
                          total_candidates=driver.budget.max_generations * driver.popsize * per_candidate,
                          done_candidates=driver.state.evals, config=recipe.model_dump(mode="json"))

        val_tokens = [0]  # every validation scoring of the stage (re-scores, guard, rows): part of its cost

        def on_val(x, genes=None) -> Score:  # genes: a co-evolved prompt (None: the tasks' own)
            score = scorer.score(x, val, tasks=co.tasks_for(genes) if genes else None)
            val_tokens[0] += score.tokens
            return score

        def extra(candidates, scores: list[Score]) -> dict:
            """The generation's record beyond fitness: the top candidates re-scored on validation (and the tokens
            that took), the time split, reward errors and the installed update's fidelity."""
            fitness = [sc.reward for sc in scores]
            top = np.argsort(fitness)[::-1][:rescore_top]
            before = val_tokens[0]
            if co is None:
                vals = [{"fitness": fitness[i], "val": on_val(candidates[i]).reward, "x": candidates[i].tolist()}
                        for i in top]
            else:  # a pair: its vector with its prompt
                pairs = [(candidates[i].x, co.population[candidates[i].prompt]) for i in top]
                vals = [{"fitness": fitness[i], "val": on_val(x, g).reward, "x": x.tolist(), "prompt": co.to_json(g)}
                        for i, (x, g) in zip(top, pairs)]
            return {**{key: sum(sc.timing[key] for sc in scores) for key in ("merge_load_s", "generate_s", "score_s")},
                    "val": vals, "val_tokens": val_tokens[0] - before,
                    "reward_errors": sum(sc.reward_errors for sc in scores),
                    "fidelity_max": max(sc.fidelity for sc in scores),
                    "fidelity_mean": float(np.mean([sc.fidelity for sc in scores]))}

        def log(record: dict) -> None:
            logger.info("generation %d: best %.3f mean %.3f sigma %.3f | val %s", record["generation"],
                        record["best"], record["mean"], record["sigma"],
                        ", ".join(f"{v['val']:.3f}" for v in record["val"]))
            if "actors" in record:
                logger.info("engine actors: %s", ", ".join(f"#{a['actor']} {a['candidates']} candidates "
                                                            f"{a['per_s']:.2f}/s" for a in record["actors"]))
            tracker.generation(record)

        drive(co or driver, score_generation(scorer, fit_pool, s, reward=fit_reward, extra=extra,
                                             on_candidate=tracker.candidate_done, split=co.split if co else None),
              on_record=log)
        state = driver.state
        best = max((v for r in state.history for v in r["val"]), key=lambda v: v["val"])
        x_best = np.array(best["x"])
        genes_best = co.from_json(best["prompt"], "the best validation entry") if co else None
        t_after = time.perf_counter()
        val_tokens[0] = 0  # from here: the guard's and the rows' scorings (the generations' are in their records)
        decision, vals = guard(lambda c: on_val(*c), (x0, start), (x_best, genes_best)) if s.guard else (None, {})
        if decision and decision["kept"] == "x0":
            x_best, genes_best = np.asarray(x0), start
        vals["hyper-es"] = vals.get("search" if decision and decision["kept"] == "search" else "x0")
        refs = {"base": genome.uniform(0.0), "uniform": genome.uniform(1.0 / len(ds)), "x0": np.asarray(x0),
                "hyper-es": x_best}
        prompts = {"hyper-es": genes_best}  # the other rows keep the tasks' own prompts
        result = {"generations": state.generation, "evals": state.evals, "search_seconds": state.seconds,
                  "stop": state.stop, "scale_scan": scan, "guard": decision, "best_val_generation_entry": best,
                  "rows": {}}
        for name, x in refs.items():  # val_per_row: per validation problem, in task then row order (paired use)
            genes = prompts.get(name)
            v = vals.get(name) or on_val(x, genes)
            as_prompted = co.tasks_for(genes) if genes else None
            result["rows"][name] = {"val": v.reward, "val_per_row": v.per_row,
                                    "test": scorer.score(x, test, tasks=as_prompted).reward if test else None}
        if co:
            result["prompt"] = {"genes": co.to_json(genes_best), "prompt": co.describe(genes_best),
                                "exported": co.exported(genes_best)}
        result["val_tokens"] = val_tokens[0] + sum(r.get("val_tokens", 0) for r in state.history)
        # The stage's wall time: the scan, the generations (their re-scores included) and what follows them; the
        # engine's start is not in it (it differs between a first run and a resume).
        result["stage_seconds"] = ((scan or {}).get("seconds", 0.0) + state.seconds + time.perf_counter() - t_after)
        engine.restore()
    finally:
        if tracker:
            tracker.close()
        engine.close()
        stack.close()
    (out / "best.json").write_text(genome.to_json(x_best))
    if co:  # the prompt the hyper-es row was scored with
        write_json_atomic(out / PROMPT_FILE, result["prompt"])
    write_json_atomic(out / "result.json", result)
    logger.info("search done: %s", json.dumps(result["rows"]))
    return result
