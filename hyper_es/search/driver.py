"""CMA-ES driver (pycma ask/tell) over a genome: budgets, per-generation JSONL log, atomic checkpoints, resume.

The driver knows nothing about LLMs: `fitness(candidates, generation) -> list[float]` (higher is better) is given
by the caller. Every generation is checkpointed (pickled pycma state + NumPy's global RNG, which pycma samples
from + log), so a search killed at any point and re-run on the same folder reaches exactly the result of an
uninterrupted one (provided `fitness` is a deterministic function of its inputs and the generation).
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

logger = logging.getLogger(__name__)
CHECKPOINT = "checkpoint.pkl"
LOG = "generations.jsonl"

Fitness = Callable[[list[np.ndarray], int], Sequence[float]]


@dataclass
class Budget:
    max_generations: int = 10
    max_evals: int | None = None
    wall_clock_s: float | None = None


@dataclass
class SearchState:
    es: object
    np_random: tuple | None = None  # NumPy's global RNG state: pycma samples from it
    generation: int = 0
    evals: int = 0
    seconds: float = 0.0
    best_x: list[float] | None = None
    best_fitness: float = -np.inf
    history: list[dict] = field(default_factory=list)


class CMASearch:
    def __init__(self, x0, sigma0: float, *, lower=None, upper=None, popsize: int | None = None, seed: int = 0,
                 budget: Budget = Budget(), out: str | Path | None = None):
        self.x0 = np.asarray(x0, dtype=np.float64)
        self.sigma0, self.popsize, self.seed, self.budget = sigma0, popsize, seed, budget
        self.lower, self.upper = lower, upper
        self.out = Path(out) if out else None

    def _fresh(self) -> SearchState:
        import cma

        opts = {"seed": self.seed + 1, "verbose": -9}  # pycma treats seed 0 as "random"
        if self.popsize:
            opts["popsize"] = self.popsize
        if self.lower is not None:
            opts["bounds"] = [list(np.asarray(self.lower, float)), list(np.asarray(self.upper, float))]
        es = cma.CMAEvolutionStrategy(self.x0.tolist(), self.sigma0, opts)
        return SearchState(es=es)

    def load(self) -> SearchState:
        path = self.out / CHECKPOINT if self.out else None
        if path and path.is_file():
            with path.open("rb") as f:
                state = pickle.load(f)
            np.random.set_state(state.np_random)
            self._write_log(state)  # a kill between checkpoint and log left the log one generation behind
            logger.info("resuming search at generation %d from %s", state.generation, path)
            return state
        return self._fresh()

    def _save(self, state: SearchState) -> None:
        if not self.out:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        state.np_random = np.random.get_state()
        tmp = self.out / f".{CHECKPOINT}.tmp"
        with tmp.open("wb") as f:
            pickle.dump(state, f)
        # Checkpoint first, then the log, rewritten from the checkpointed history: a generation in the log is
        # always in the checkpoint, and a resumed run rewrites the log from the checkpoint.
        os.replace(tmp, self.out / CHECKPOINT)
        self._write_log(state)

    def _write_log(self, state: SearchState) -> None:
        log_tmp = self.out / f".{LOG}.tmp"
        log_tmp.write_text("".join(json.dumps(r) + "\n" for r in state.history))
        os.replace(log_tmp, self.out / LOG)

    def done(self, state: SearchState) -> bool:
        b = self.budget
        return (state.generation >= b.max_generations or (b.max_evals is not None and state.evals >= b.max_evals)
                or (b.wall_clock_s is not None and state.seconds >= b.wall_clock_s))

    def run(self, fitness: Fitness, on_generation: Callable[..., None] | None = None) -> SearchState:
        """Ask/tell until the budget is spent; returns the final state (best_x, history, es).

        `on_generation(record, xs, scores)` may add fields to the record before it is checkpointed.
        """
        state = self.load()
        while not self.done(state):
            t0 = time.perf_counter()
            xs = state.es.ask()
            scores = [float(s) for s in fitness([np.asarray(x) for x in xs], state.generation)]
            state.es.tell(xs, [-s for s in scores])  # pycma minimises
            best = int(np.argmax(scores))
            if scores[best] > state.best_fitness:
                state.best_fitness, state.best_x = scores[best], np.asarray(xs[best]).tolist()
            state.generation += 1
            state.evals += len(xs)
            record = {"generation": state.generation, "evals": state.evals, "best": max(scores),
                      "mean": float(np.mean(scores)), "median": float(np.median(scores)),
                      "sigma": float(state.es.sigma), "best_x": np.asarray(xs[best]).tolist(),
                      "seconds": time.perf_counter() - t0}
            if on_generation:
                on_generation(record, [np.asarray(x) for x in xs], scores)
            state.seconds += time.perf_counter() - t0  # the generation's wall time, validation re-scoring included
            state.history.append(record)
            self._save(state)
        return state
