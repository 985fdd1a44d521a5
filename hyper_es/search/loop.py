"""The one generation loop, for every strategy: ask → score → tell → engine update → log and checkpoint.

A strategy (pycma's and evosax's surface) has `generation` (generations told), `ask()` (candidates: coefficient
vectors, ES members, …), `tell(candidates, fitness, **extra) -> record` (checkpoints, and returns the generation's
log record), `done()`, `records()` (the told generations, replayed from disk on resume) and
`engine_update(record)` (what a told generation asks of the engine: an ES step, or None). CMA-ES over
coefficients (search/driver.py) and OpenAI-style ES over seeds (search/es_strategy.py) are two strategies; a
third (co-evolution) fits without touching this loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np


class Strategy(Protocol):
    generation: int

    def ask(self) -> list: ...

    def tell(self, candidates: list, fitness: list[float], **extra) -> dict: ...

    def done(self) -> bool: ...

    def records(self) -> list[dict]: ...

    def engine_update(self, record: dict) -> tuple | None: ...


Evaluate = Callable[[list, int], tuple[list[float], dict]]


def drive(strategy: Strategy, evaluate: Evaluate, *, update: Callable | None = None,
          on_record: Callable[[dict], None] | None = None) -> Strategy:
    """Run `strategy` until done. `evaluate(candidates, generation) -> (fitness, extra record fields)`;
    `update(*args)` applies a generation's engine update (first those of the generations replayed from disk)."""
    if update is not None:
        for record in strategy.records():
            args = strategy.engine_update(record)
            if args is not None:
                update(*args)
    while not strategy.done():
        generation = strategy.generation
        candidates = strategy.ask()
        fitness, extra = evaluate(candidates, generation)
        record = strategy.tell(candidates, fitness, **extra)
        args = strategy.engine_update(record)
        if args is not None and update is not None:
            update(*args)
        if on_record is not None:
            on_record(record)
    return strategy


def generation_scores(scorer, pool: dict, s, candidates: list, generation: int, *, reward=None,
                      answers: bool = False, on_done=None, split=None) -> list:
    """The candidates' Scores on generation `generation`'s fitness minibatch (fitness.fitness_set, minibatch,
    samples, temperature, seed + generation; `reward` replaces the tasks' own). `split(candidates)`: (genomes,
    each one's tasks as prompted), for candidates that carry a prompt (co-evolution)."""
    from hyper_es.fitness import fitness_rows

    kw = {"answers": True} if answers else {}
    if split is not None:
        candidates, kw["tasks"] = split(candidates)
    return scorer.score_many(candidates, fitness_rows(pool, s, generation), samples=s.samples,
                             temperature=s.temperature, seed=s.seed + generation, reward=reward, on_done=on_done, **kw)


def raced_scores(scorer, pool: dict, s, candidates: list, generation: int, parents: int, weights: dict[str, float],
                 *, reward=None) -> tuple[list, dict]:
    """The candidates' Scores when racing (fitness.race, search/racing.py): the generation's minibatch (as
    `generation_scores` draws it) in rungs of rows, the tasks interleaved; a candidate's Score covers the rows it was
    scored on (its reward the task-weighted mean there). Returns (Scores, the race's record: rows and tier per
    candidate, evaluations, and `told`, the ranking for the strategy)."""
    from hyper_es.environments import combined_by_task
    from hyper_es.errors import DataError
    from hyper_es.fitness import Score, fitness_rows
    from hyper_es.search.racing import TIERS, interleaved, race

    rows = fitness_rows(pool, s, generation)
    order = interleaved({name: len(r) for name, r in rows.items()})
    rungs = [r for r in s.race.rungs if r < len(order)] + [len(order)]
    # A rung's rows per task (in the pool's task order, the Scorer's: its per-row rewards come task by task).
    bounds = list(zip([0, *rungs[:-1]], rungs))
    parts_of = {lo: {name: [rows[name][i] for n, i in order[lo:hi] if n == name] for name in rows} for lo, hi in bounds}
    labels = np.array([name for lo, _ in bounds for name, r in parts_of[lo].items() for _ in r])
    parts: dict[int, list] = {c: [] for c in range(len(candidates))}

    def score(cands: list[int], lo: int, hi: int):
        part = {name: r for name, r in parts_of[lo].items() if r}
        scores = scorer.score_many([candidates[c] for c in cands], part, samples=s.samples,
                                   temperature=s.temperature, seed=s.seed + generation, reward=reward)
        for c, sc in zip(cands, scores):
            if min(sc.per_row, default=0) < 0 or max(sc.per_row, default=0) > 1:
                raise DataError(f"fitness.race: a fitness reward of {min(sc.per_row)}..{max(sc.per_row)}; racing "
                                f"bounds rewards in [0, 1] (use a 0-1 reward, or no race)")
            parts[c].append(sc)
        return np.array([sc.per_row for sc in scores])

    def mean(r: np.ndarray) -> float:
        tasks = labels[: len(r)]
        present = [n for n in rows if (tasks == n).any()]
        return sum(weights[n] * float(np.mean(r[tasks == n])) for n in present) / sum(weights[n] for n in present)

    raced = race(score, len(candidates), rungs, parents, delta=s.race.delta, mean=mean)
    out = []
    for c, scs in parts.items():
        out.append(Score(raced.fitness[c], sum(sc.tokens for sc in scs),
                         {k: sum(sc.timing.get(k, 0.0) for sc in scs) for k in ("merge_load_s", "generate_s", "score_s")},
                         sum(sc.reward_errors for sc in scs), [v for sc in scs for v in sc.per_row],
                         max(sc.fidelity for sc in scs), episodes=combined_by_task([sc.episodes for sc in scs])))
    record = {"rungs": rungs, "rows": raced.rows, "tiers": [TIERS[t] for t in raced.tiers],
              "evaluations": raced.evaluations, "full": len(order) * len(candidates)}
    return out, {"told": raced.told, "race": record}


def score_generation(scorer, pool: dict, s, *, reward=None, answers: bool = False, on_candidate=None,
                     extra: Callable[[list, list, list], dict] | None = None, split=None,
                     race: tuple[int, dict[str, float]] | None = None) -> Evaluate:
    """`evaluate` for `drive`: every candidate's Score on the generation's fitness minibatch (fitness.fitness_set,
    minibatch, samples, temperature, seed + generation; `reward` replaces the tasks' own). The record gets the
    generation's tokens, `extra(candidates, scores, ranking)`'s fields (ranking: what the strategy is told), and an
    engine pool's per-actor counts. `race`: (the strategy's parents, the tasks' weights) to race the candidates
    (fitness.race); the record then has `told` (the ranking, which the strategy takes in place of the means) and
    `race`."""

    def evaluate(candidates: list, generation: int) -> tuple[list[float], dict]:
        raced = {}
        if race is not None:
            scores, raced = raced_scores(scorer, pool, s, candidates, generation, *race, reward=reward)
            for _ in candidates:
                if on_candidate:
                    on_candidate()
        else:
            scores = generation_scores(scorer, pool, s, candidates, generation, reward=reward, answers=answers,
                                       on_done=on_candidate, split=split)
        fitness = [sc.reward for sc in scores]
        fields = {"tokens": sum(sc.tokens for sc in scores), **raced,
                  **(extra(candidates, scores, raced.get("told", fitness)) if extra else {})}
        if hasattr(scorer, "throughput"):  # an engine pool: per-actor counts
            fields["actors"] = scorer.throughput()
        return fitness, fields

    return evaluate
