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
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hyper_es.directions import DirectionSet
from hyper_es.engine import inplace_engine
from hyper_es.engine.fidelity import WARN_ABOVE
from hyper_es.errors import DataError
from hyper_es import models, rewards
from hyper_es.evaluate.runner import reward_errors, score_completions
from hyper_es.rewards.extract import final_answer
from hyper_es.io import read_json, write_json_atomic
from hyper_es.merging import recipe_genome
from hyper_es.recipe import Recipe
from hyper_es.search.driver import CHECKPOINT, Budget, CMASearch
from hyper_es.search.start import guard, scale_scan
from hyper_es.search.tracking import Tracker
from hyper_es.tasks import Task

logger = logging.getLogger(__name__)


@dataclass
class Score:
    reward: float
    tokens: int = 0
    timing: dict = field(default_factory=dict)
    reward_errors: int = 0  # reward calls that raised and scored 0
    per_row: list[float] = field(default_factory=list)  # mean reward per problem, in row order (paired comparisons)
    fidelity: float = 0.0  # ‖installed − intended‖ / ‖intended‖ of the update the engine served (engine/fidelity.py)
    answers: list[str | None] = field(default_factory=list)  # first completion's final answer per problem (diversity)


class Scorer:
    """Scores genomes with a resident in-place engine (VLLMInPlace or HFInPlace) on rows of several tasks.

    A candidate's prompts of every task go to the engine in one call (vLLM batches them together). The reward
    is the task-weighted mean over prompts and samples."""

    def __init__(self, engine, tokenizer, tasks: list[Task]):
        self.engine, self.tok, self.tasks = engine, tokenizer, tasks
        self._ids: dict[tuple[str, str], list[int]] = {}
        self._fidelity_warned = False

    def _prompt_ids(self, task: Task, rows: list[dict]) -> list[list[int]]:
        missing = [r for r in rows if (task.name, r["id"]) not in self._ids]
        max_len = getattr(self.engine, "max_model_len", None)  # over-long prompts are refused (or cut)
        for r, ids in zip(missing, task.prompt_ids(self.tok, missing, max_len) if missing else []):
            self._ids[(task.name, r["id"])] = ids
        return [self._ids[(task.name, r["id"])] for r in rows]

    def prepare(self, *splits: dict[str, list[dict]]) -> None:
        """Tokenise (and length-check) every row up front: an over-long prompt fails now, not generations later."""
        for rows in splits:
            for task in self.tasks:
                if rows.get(task.name):
                    self._prompt_ids(task, rows[task.name])

    def score(self, x, rows: dict[str, list[dict]], *, samples: int = 1, temperature: float = 0.0,
              seed: int = 0, reward=None, answers: bool = False) -> Score:
        """Mean reward of genome x on `rows`; `reward` (a callable) replaces each task's own (search.reward). With
        `answers`, each problem's first final answer is kept too (ES's population diversity)."""
        t0, failed = time.perf_counter(), rewards.failures()
        self.engine.set_genome(x)
        fidelity = float(getattr(self.engine, "last_fidelity", 0.0))
        if fidelity > WARN_ABOVE and not self._fidelity_warned:
            self._fidelity_warned = True
            logger.warning("the installed update differs from the intended one by %.0f%%: bf16 rounds the merge "
                           "away; set eval.dtype: float32 (logged once; fidelity_max per generation)",
                           100 * fidelity)
        t1 = time.perf_counter()
        tasks = [t for t in self.tasks if rows.get(t.name)]
        samplings = [t.sampling(n=samples, temperature=temperature, seed=seed) for t in tasks]
        outs = self.engine.generate_groups([(self._prompt_ids(t, rows[t.name]), sp)
                                            for t, sp in zip(tasks, samplings)])
        t2 = time.perf_counter()
        total, weight, tokens, per_row, finals = 0.0, 0.0, 0, [], []
        for task, sampling, task_outs in zip(tasks, samplings, outs):
            scored = []
            for row, completions in zip(rows[task.name], task_outs, strict=True):
                texts, row_scores = score_completions(self.tok, task, row, completions, sampling.stop, reward)
                scored += row_scores
                per_row.append(float(np.mean(row_scores)))
                if answers:
                    finals.append(final_answer(texts[0]) if texts else None)
                tokens += sum(map(len, completions))
            total += task.cfg.weight * float(np.mean(scored))
            weight += task.cfg.weight
        timing = {"merge_load_s": t1 - t0, "generate_s": t2 - t1, "score_s": time.perf_counter() - t2}
        return Score(total / weight, tokens, timing, reward_errors(failed), per_row, fidelity=fidelity,
                     answers=finals)


    def score_many(self, xs: list, rows: dict[str, list[dict]], *, on_done=None, **kw) -> list[Score]:
        """Scores of several genomes on the same rows, in order (an engine pool spreads them over its actors)."""
        out = []
        for x in xs:
            out.append(self.score(x, rows, **kw))
            if on_done:
                on_done()
        return out


def fitness_splits(recipe: Recipe) -> tuple[list[Task], dict[str, list[dict]], dict[str, list[dict]]]:
    """The searched tasks (search.tasks, else those with a val split), their fitness pool (train rows; tasks without
    a train split are searched on validation rows) and their first val_size validation rows."""
    s = recipe.search
    names = s.tasks or [t.name for t in recipe.tasks if t.val is not None]
    tasks = [Task(recipe.task(n), recipe.base_dir) for n in names]
    train = {t.name: t.rows("train") for t in tasks if t.cfg.train is not None}
    val = {t.name: t.rows("val")[: s.val_size] for t in tasks}
    return tasks, train or val, val


def fitness_rows(pool: dict[str, list[dict]], s, generation: int) -> dict[str, list[dict]]:
    """The generation's minibatch per task: one fixed draw (`fitness_set: fixed`) or one per generation."""
    draw = 0 if s.fitness_set == "fixed" else generation
    return {n: _draw(r, s.minibatch, s.seed * 100_003 + draw) for n, r in pool.items()}


def _draw(rows: list[dict], n: int, seed: int) -> list[dict]:
    return random.Random(seed).sample(rows, min(n, len(rows)))


def search(recipe: Recipe, run_dir: str | Path, *, backend: str | None = None, score_test: bool = True) -> dict:
    """Run (or resume) the search in RUN/search/; returns the result written to RUN/search/result.json.

    `score_test=False` leaves the test split to a later evaluation (`hyper-es run` evaluates every row there)."""
    run_dir = Path(run_dir)
    out = run_dir / "search"
    s, m = recipe.search, recipe.merge
    backend = backend or recipe.eval.backend
    base = models.resolve(recipe.model.name, revision=recipe.model.revision)
    ds = DirectionSet.from_run(run_dir)
    if Path(ds.base_path).resolve() != Path(base).resolve():
        raise DataError(f"{run_dir}/directions: trained on '{ds.base}', but the recipe's model.name is "
                        f"'{recipe.model.name}'")
    genome, settings = recipe_genome(recipe, ds)
    tasks, fit_pool, val = fitness_splits(recipe)
    test = {t.name: t.rows("test") for t in tasks if t.cfg.test is not None and score_test}

    if (out / CHECKPOINT).is_file():
        read_json(out / CHECKPOINT, "delete it (and generations.jsonl) to restart the search")  # before an engine
    lo, hi = genome.lower_upper()
    x0, sigma0 = genome.initial(s.x0, m.density), s.sigma0
    fit_reward = rewards.get(s.reward) if s.reward else None

    stack = contextlib.ExitStack()
    if recipe.executor.kind == "ray":  # a pool of resident engines, one per actor (the stack closes it)
        from hyper_es.distributed.pool import engine_pool

        engine = scorer = engine_pool(stack, recipe, "inplace", run_dir=str(run_dir), backend=backend,
                                      workdir=str(out / "engine"), seed=s.seed, fused=s.compile_merge)
    else:
        engine, tok = inplace_engine(recipe, backend, ds, genome, settings, out / "engine", seed=s.seed,
                                     fused=s.compile_merge)
        scorer = Scorer(engine, tok, tasks)
    tracker = None
    try:
        scorer.prepare(fit_pool, val, test)

        def fit_many(xs, generation: int, on_done=None) -> list[Score]:
            return scorer.score_many(xs, fitness_rows(fit_pool, s, generation), samples=s.samples,
                                     temperature=s.temperature, seed=s.seed + generation, reward=fit_reward,
                                     on_done=on_done)

        def fit(x, generation: int) -> Score:
            return fit_many([x], generation)[0]

        scan = scale_scan(lambda x: fit(x, 0), genome, x0, s.scale_scan, out) if s.scale_scan else None
        if scan:
            x0, sigma0 = np.asarray(scan["x0"]), scan["sigma0"]
        driver = CMASearch(x0, sigma0, lower=lo, upper=hi, popsize=s.popsize, seed=s.seed,
                           budget=Budget(s.max_generations, s.max_evals, s.wall_clock_s), out=out)
        tracker = Tracker(out, kind=s.tracking, total_candidates=s.max_generations * driver.popsize,
                          done_candidates=driver.state.evals, config=recipe.model_dump(mode="json"))
        while not driver.done():
            generation = driver.state.generation
            xs = driver.ask()
            scores = fit_many(xs, generation, on_done=tracker.candidate_done)
            fitness = [sc.reward for sc in scores]
            top = np.argsort(fitness)[::-1][: s.rescore_top]
            val_scores = [{"fitness": fitness[i], "val": scorer.score(xs[i], val).reward, "x": xs[i].tolist()}
                          for i in top]
            timing = {key: sum(sc.timing[key] for sc in scores) for key in ("merge_load_s", "generate_s", "score_s")}
            record = driver.tell(xs, fitness, tokens=sum(sc.tokens for sc in scores), **timing, val=val_scores,
                                 reward_errors=sum(sc.reward_errors for sc in scores),
                                 fidelity_max=max(sc.fidelity for sc in scores),
                                 fidelity_mean=float(np.mean([sc.fidelity for sc in scores])),
                                 **({"actors": engine.throughput()} if hasattr(engine, "throughput") else {}))
            logger.info("generation %d: best %.3f mean %.3f sigma %.3f | val %s", record["generation"],
                        record["best"], record["mean"], record["sigma"],
                        ", ".join(f"{v['val']:.3f}" for v in record["val"]))
            if "actors" in record:
                logger.info("engine actors: %s", ", ".join(f"#{a['actor']} {a['candidates']} candidates "
                                                            f"{a['per_s']:.2f}/s" for a in record["actors"]))
            tracker.generation(record)
        state = driver.state
        best = max((v for r in state.history for v in r["val"]), key=lambda v: v["val"])
        x_best = np.array(best["x"])
        decision, vals = guard(lambda x: scorer.score(x, val), x0, x_best) if s.guard else (None, {})
        if decision and decision["kept"] == "x0":
            x_best = np.asarray(x0)
        vals["hyper-es"] = vals.get("search" if decision and decision["kept"] == "search" else "x0")
        refs = {"base": genome.uniform(0.0), "uniform": genome.uniform(1.0 / len(ds)), "x0": np.asarray(x0),
                "hyper-es": x_best}
        result = {"generations": state.generation, "evals": state.evals, "search_seconds": state.seconds,
                  "stop": state.stop, "scale_scan": scan, "guard": decision, "best_val_generation_entry": best,
                  "rows": {}}
        for name, x in refs.items():  # val_per_row: per validation problem, in task then row order (paired use)
            v = vals.get(name) or scorer.score(x, val)
            result["rows"][name] = {"val": v.reward, "val_per_row": v.per_row,
                                    "test": scorer.score(x, test).reward if test else None}
        engine.restore()
    finally:
        if tracker:
            tracker.close()
        engine.close()
        stack.close()
    (out / "best.json").write_text(genome.to_json(x_best))
    write_json_atomic(out / "result.json", result)
    logger.info("search done: %s", json.dumps(result["rows"]))
    return result
