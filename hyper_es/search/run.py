"""`hyper-es search`: CMA-ES over the genome, fitness = mean verified reward of greedy generations.

Optionally, a scale scan picks the start (search/start.py). Each generation draws one minibatch of train prompts
(seeded by the generation, or one fixed draw), seen by every candidate, scored with the task's reward or
`fitness.reward`. The best `rescore_top` candidates of each generation are re-scored on the validation split; the
final genome is the best by validation (or, with `search.recommend: mean`, CMA-ES's mean after the last
generation), if it beats x0 there (the guard), else x0. It is reported once on the
test split next to the base (all coefficients 0), the uniform merge and x0.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from hyper_es.cost import Cost, stage_cost
from hyper_es.directions import DirectionSet
from hyper_es.directions.collect import prepare_search
from hyper_es.engine import inplace_engine
from hyper_es.environments import combined_by_task
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
from hyper_es.tasks.proposals import proposals_spent
from hyper_es.rundir import BEST_FILE, RESULT_FILE, SEARCH_DIR

if TYPE_CHECKING:
    from hyper_es.merging import Genome, MergeSettings

logger = logging.getLogger(__name__)


def cma_popsize(n: int) -> int:
    """pycma's default population for n dimensions (4 + ⌊3 ln n⌋): a LoRA engine's batch of adapters."""
    return 4 + int(3 * math.log(n))


@dataclass
class Setup:
    """What the search needs before an engine starts: the recipe (with co-evolution's proposals), the directions,
    genome, splits and the fitness reward."""
    recipe: Recipe
    run_dir: Path
    backend: str
    ds: DirectionSet
    genome: Genome
    settings: MergeSettings
    tasks: list
    fit_pool: dict
    val: dict
    test: dict
    fit_reward: object

    @property
    def out(self) -> Path:
        return self.run_dir / SEARCH_DIR

    @property
    def batch(self) -> int:  # a LoRA engine's adapter slots: one generation
        return self.recipe.search.popsize or cma_popsize(self.genome.size)


class Validation:
    """Validation scorings of the stage (re-scores, guard, rows), counted: their tokens are its selection cost."""

    def __init__(self, scorer, val: dict):
        self.scorer, self.val, self.co, self.tokens = scorer, val, None, 0

    def __call__(self, x, genes=None) -> Score:  # genes: a co-evolved prompt (None: the tasks' own)
        score = self.scorer.score(x, self.val, tasks=self.co.tasks_for(genes) if genes else None)
        self.tokens += score.tokens
        return score


def search(recipe: Recipe, run_dir: str | Path, *, backend: str | None = None, score_test: bool = True,
           reward=None) -> dict:
    """Run (or resume) the search in RUN/search/; returns the result written to RUN/search/result.json.

    `score_test=False` leaves the test split to a later evaluation (`hyper-es run` evaluates every row there).
    `reward`: a callable `(completion, reference) -> float` in place of every searched task's own (fitness,
    validation and test; `fitness.reward` still replaces it for fitness), in this process (the Python API's)."""
    st = prepare(recipe, run_dir, backend=backend, score_test=score_test, reward=reward)
    with contextlib.ExitStack() as stack:
        engine, scorer = _engine(stack, st)
        scorer.prepare(st.fit_pool, st.val, st.test)
        validation = Validation(scorer, st.val)
        driver, co, scan, x0 = drive_search(st, scorer, validation, stack)
        result, x_best = finish(st, scorer, validation, driver, scan, x0)
        engine.restore()
    (st.out / BEST_FILE).write_text(st.genome.to_json(x_best))
    if co:  # the prompt the hyper-es row was scored with
        write_json_atomic(st.out / PROMPT_FILE, result["prompt"])
    write_json_atomic(st.out / RESULT_FILE, result)
    logger.info("search done: %s", json.dumps(result["rows"]))
    return result


def prepare(recipe: Recipe, run_dir: str | Path, *, backend: str | None = None, score_test: bool = True,
            reward=None) -> Setup:
    """RUN/recipe.yaml and the directions the recipe names, co-evolution's template rewrites, and every check that
    needs no engine: the directions' base, all-zero directions, a damaged checkpoint."""
    run_dir = Path(run_dir)
    backend = backend or recipe.eval.backend
    prepare_search(recipe, run_dir)  # RUN/recipe.yaml, and the directions the recipe names
    recipe = proposed(recipe, run_dir, backend)  # co-evolution's template rewrites, if asked for: before the engine
    ds = DirectionSet.from_run(run_dir)
    zero = ds.zero_directions()  # reads every dense tensor: once
    _check_directions(recipe, run_dir, ds, zero)
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
    if (run_dir / SEARCH_DIR / CHECKPOINT).is_file():  # before an engine
        read_json(run_dir / SEARCH_DIR / CHECKPOINT, "delete it (and generations.jsonl) to restart the search")
    fit_reward = rewards.get(recipe.fitness.reward) if recipe.fitness.reward else None
    return Setup(recipe, run_dir, backend, ds, genome, settings, tasks, fit_pool, val, test, fit_reward)


def _check_directions(recipe: Recipe, run_dir: Path, ds: DirectionSet, zero: list[str]) -> None:
    base = models.resolve(recipe.model.name, revision=recipe.model.revision)
    if Path(ds.base_path).resolve() != Path(base).resolve():
        raise DataError(f"{run_dir}/directions: trained on '{ds.base}', but the recipe's model.name is "
                        f"'{recipe.model.name}'")
    if len(zero) == len(ds):
        raise DataError(f"{run_dir}/directions: every direction is 0 in every tensor, so no merge of them changes the "
                        f"model (their jobs' rewards never varied: GRPO's advantages were 0); train them with a "
                        f"reward the base can earn (gradient.rewards), or name other adapters")


def _engine(stack: contextlib.ExitStack, st: Setup):
    """(engine, scorer): a pool of resident engines, one per Ray actor, or one in-place merge engine; the stack
    closes it."""
    s, seed = st.recipe.serve, st.recipe.fitness.seed
    if st.recipe.executor.kind == "ray":
        from hyper_es.fitness.pool import engine_pool

        from hyper_es.engine import run_engine

        engine = engine_pool(stack, st.recipe, run_engine, run_dir=str(st.run_dir), backend=st.backend,
                             workdir=str(st.out / "engine"), seed=seed, fused=s.compile_merge, batch=st.batch)
        return engine, engine
    engine, tok = inplace_engine(st.recipe, st.backend, st.ds, st.genome, st.settings, st.out / "engine", seed=seed,
                                 fused=s.compile_merge, batch=st.batch)
    stack.callback(engine.close)
    return engine, Scorer(engine, tok, st.tasks)


def _strategy(st: Setup, x0, sigma0, scan_tokens: int = 0):
    """(strategy, validation re-scores per generation): CMA-ES from x0, or x0 throughout (prompt-only)."""
    s, f = st.recipe.search, st.recipe.fitness
    budget = Budget(s.max_generations, s.max_evals, s.wall_clock_s, s.max_tokens, tokens_before=scan_tokens)
    if st.recipe.coevolve and st.recipe.coevolve.weights == "fixed":  # prompt-only: x0 throughout, as many scorings
        c = st.recipe.coevolve
        vectors = math.ceil(c.population / min(c.pairs, c.population))  # every prompt met once a generation
        budget.max_generations = math.ceil(st.batch * s.max_generations / vectors)
        # as many validation re-scores in all as the search makes: fewer per (more, smaller) generation
        rescore_top = max(1, round(f.rescore_top * s.max_generations / budget.max_generations))
        return FixedWeights(x0, vectors=vectors, budget=budget, out=st.out, seed=f.seed), rescore_top
    lo, hi = st.genome.lower_upper()
    return CMASearch(x0, sigma0, lower=lo, upper=hi, popsize=s.popsize, seed=f.seed, budget=budget,
                     out=st.out), f.rescore_top


def drive_search(st: Setup, scorer, validation: Validation, stack: contextlib.ExitStack):
    """The scale scan (if asked for), then the generations until the budget is spent (resuming from the
    checkpoint); returns (strategy, co-evolution or None, scan or None, x0)."""
    s = st.recipe.search
    x0, sigma0 = st.genome.initial(s.x0, st.recipe.merge.density), s.sigma0

    def fit(x) -> Score:  # one candidate on generation 0's minibatch (the scale scan's)
        return generation_scores(scorer, st.fit_pool, st.recipe.fitness, [x], 0, reward=st.fit_reward)[0]

    scan = scale_scan(fit, st.genome, x0, s.scale_scan, st.out) if s.scale_scan else None
    if scan:
        x0, sigma0 = np.asarray(scan["x0"]), scan["sigma0"]
    driver, rescore_top = _strategy(st, x0, sigma0, (scan or {}).get("tokens", 0))
    co = coevolution(st.recipe, driver, st.tasks) if st.recipe.coevolve else None  # prompts paired with the vectors
    validation.co = co
    per_candidate = min(st.recipe.coevolve.pairs, st.recipe.coevolve.population) if co else 1  # scorings a vector
    tracker = Tracker(st.out, kind=s.tracking,
                      total_candidates=driver.budget.max_generations * driver.popsize * per_candidate,
                      done_candidates=driver.state.evals, config=st.recipe.model_dump(mode="json"))
    stack.callback(tracker.close)

    def extra(candidates, scores: list[Score], ranking: list[float]) -> dict:
        """The generation's record beyond fitness: the top candidates (by the ranking the strategy is told)
        re-scored on validation (and the tokens that took), the time split, reward errors and the installed
        update's fidelity."""
        fitness = [sc.reward for sc in scores]
        top = np.argsort(ranking, kind="stable")[::-1][:rescore_top]
        before = validation.tokens
        if co is None:
            vals = [{"fitness": fitness[i], "val": validation(candidates[i]).reward, "x": candidates[i].tolist()}
                    for i in top]
        else:  # a pair: its vector with its prompt
            pairs = [(candidates[i].x, co.population[candidates[i].prompt]) for i in top]
            vals = [{"fitness": fitness[i], "val": validation(x, g).reward, "x": x.tolist(), "prompt": co.to_json(g)}
                    for i, (x, g) in zip(top, pairs)]
        return {**{key: sum(sc.timing[key] for sc in scores) for key in ("merge_load_s", "generate_s", "score_s")},
                "val": vals, "val_tokens": validation.tokens - before,
                "per_row": [sc.per_row for sc in scores],  # each candidate's rewards on its rows (racing replays)
                "reward_errors": sum(sc.reward_errors for sc in scores),
                "fidelity_max": max(sc.fidelity for sc in scores),
                "fidelity_mean": float(np.mean([sc.fidelity for sc in scores])),
                **({"episodes": combined_by_task([sc.episodes for sc in scores])} if scores[0].episodes else {})}

    def log(record: dict) -> None:
        logger.info("generation %d: best %.3f mean %.3f sigma %.3f | val %s", record["generation"],
                    record["best"], record["mean"], record["sigma"],
                    ", ".join(f"{v['val']:.3f}" for v in record["val"]))
        if "actors" in record:
            logger.info("engine actors: %s", ", ".join(f"#{a['actor']} {a['candidates']} candidates "
                                                        f"{a['per_s']:.2f}/s" for a in record["actors"]))
        tracker.generation(record)

    race = (driver.parents, {t.name: t.cfg.weight for t in st.tasks}) if st.recipe.fitness.race else None
    drive(co or driver, score_generation(scorer, st.fit_pool, st.recipe.fitness, reward=st.fit_reward, extra=extra,
                                         on_candidate=tracker.candidate_done, split=co.split if co else None,
                                         race=race), on_record=log)
    return driver, co, scan, x0


def recommended(st: Setup, driver) -> dict:
    """The search's answer before the guard (`search.recommend`): the re-scored candidate best on validation, or
    CMA-ES's mean after the last generation (x0 when no generation ran)."""
    if st.recipe.search.recommend == "mean":
        return {"recommend": "mean", "x": driver.recommendation().tolist()}
    entries = [v for r in driver.state.history for v in r["val"]]
    if not entries:
        raise DataError(f"{st.out}: no generation was re-scored on validation (a budget spent before the first "
                        f"generation?); raise the budget or use search.recommend: mean")
    return max(entries, key=lambda v: v["val"])


def finish(st: Setup, scorer, validation: Validation, driver, scan, x0) -> tuple[dict, np.ndarray]:
    """The guard (the best by validation against x0), each reference row on validation and test, and the stage's
    cost; returns (result, the kept genome)."""
    state, t_after, co = driver.state, time.perf_counter(), validation.co
    best = recommended(st, driver)
    x_best, start = np.array(best["x"]), co.start() if co else None
    genes_best = co.from_json(best["prompt"], "the best validation entry") if co else None
    validation.tokens = 0  # from here: the guard's and the rows' scorings (the generations' are in their records)
    decision, vals = (guard(lambda c: validation(*c), (x0, start), (x_best, genes_best)) if st.recipe.fitness.guard
                      else (None, {}))
    if decision and decision["kept"] == "x0":
        x_best, genes_best = np.asarray(x0), start
    vals["hyper-es"] = vals.get("search" if decision and decision["kept"] == "search" else "x0")
    refs = {"base": st.genome.uniform(0.0), "uniform": st.genome.uniform(1.0 / len(st.ds)), "x0": np.asarray(x0),
            "hyper-es": x_best}
    prompts = {"hyper-es": genes_best}  # the other rows keep the tasks' own prompts
    result = {"generations": state.generation, "evals": state.evals, "stop": state.stop, "scale_scan": scan,
              "guard": decision, "best_val_generation_entry": best, "rows": {}}
    for name, x in refs.items():  # val_per_row: per validation problem, in task then row order (paired use)
        genes = prompts.get(name)
        v = vals.get(name) or validation(x, genes)
        as_prompted = co.tasks_for(genes) if genes else None
        result["rows"][name] = {"val": v.reward, "val_per_row": v.per_row,
                                "test": scorer.score(x, st.test, tasks=as_prompted).reward if st.test else None}
    if co:
        result["prompt"] = {"genes": co.to_json(genes_best), "prompt": co.describe(genes_best),
                            "exported": co.exported(genes_best)}
    # The stage's wall time: the scan, the generations (their re-scores included), what follows them and the
    # template proposals; the engine's start is not in it (it differs between a first run and a resume).
    proposals = proposals_spent(st.run_dir) if co else (0, 0.0)
    result["cost"] = stage_cost({
        "scan": Cost(search_tokens=(scan or {}).get("tokens", 0), seconds=(scan or {}).get("seconds", 0.0)),
        "generations": Cost(search_tokens=sum(r.get("tokens", 0) for r in state.history),
                            select_tokens=sum(r.get("val_tokens", 0) for r in state.history), seconds=state.seconds),
        "select": Cost(select_tokens=validation.tokens, seconds=time.perf_counter() - t_after),
        "proposals": Cost(search_tokens=proposals[0], seconds=proposals[1])})
    return result, x_best
