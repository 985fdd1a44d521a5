"""CMA-ES driver (pycma ask/tell) over a genome: budgets, per-generation JSONL log, checkpoints, resume by replay.

The driver knows nothing about LLMs: the caller asks for candidates, scores them (higher is better) and tells
the scores back. The checkpoint is plain JSON (every generation's candidates and scores), never pickle: a run
folder is data, and loading it runs no code. Resuming rebuilds pycma's state by replaying ask/tell from the
same seed, checking that each replayed generation asks for exactly the recorded candidates. pycma samples from
its own NumPy RNG stream (swapped in around every pycma call), so nothing else in the process can shift it and a
search killed at any point and re-run on the same folder reaches exactly the result of an uninterrupted one.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hyper_es.errors import DataError
from hyper_es.rundir import CHECKPOINT_FILE, LOG_FILE
from hyper_es.io import read_json, write_json_atomic, write_text_atomic

logger = logging.getLogger(__name__)
CHECKPOINT = CHECKPOINT_FILE
LOG = LOG_FILE
FORMAT = 1
FLAT = 4  # generations in a row in which every candidate scored alike: no signal left to follow


@dataclass
class Budget:
    max_generations: int = 10
    max_evals: int | None = None
    wall_clock_s: float | None = None
    max_tokens: int | None = None
    tokens_before: int = 0  # spent before the first generation (the scale scan)

    def tokens(self, history: list[dict]) -> int:
        """Generated tokens spent: before the search, then each generation's fitness and validation re-scores."""
        return self.tokens_before + sum(r.get("tokens", 0) + r.get("val_tokens", 0) for r in history)


@dataclass
class SearchState:
    generation: int = 0
    evals: int = 0
    seconds: float = 0.0
    best_x: list[float] | None = None
    best_fitness: float = -np.inf
    history: list[dict] = field(default_factory=list)  # one log record per generation
    candidates: list[list[list[float]]] = field(default_factory=list)  # per generation, for replay
    scores: list[list[float]] = field(default_factory=list)
    stop: dict | None = None  # why the search ended: {"budget": ...} or pycma's es.stop()


class CMASearch:
    """A strategy of the one loop (search/loop.py `drive`): `ask()` candidates, `tell(candidates, scores, **extra)`,
    until `done()`."""

    def __init__(self, x0, sigma0: float, *, lower=None, upper=None, popsize: int | None = None, seed: int = 0,
                 budget: Budget = Budget(), out: str | Path | None = None):
        import cma

        self.x0 = np.asarray(x0, dtype=np.float64)
        self.sigma0, self.seed, self.budget = sigma0, seed, budget
        self.lower, self.upper = lower, upper
        self.out = Path(out) if out else None
        # pycma treats seed 0 as "random". Its defaults end a search on one flat generation (tolfun), which a noisy
        # reward on a redrawn minibatch gives often (every candidate 0 on hard rows); its tolflatfitness counts in
        # es.stop(), which a resume by replay does not repeat. The flat stop is FLAT generations, from the history.
        opts = {"seed": seed + 1, "verbose": -9, "tolfun": 0, "tolflatfitness": float("inf")}
        if popsize:
            opts["popsize"] = popsize
        if lower is not None:
            opts["bounds"] = [list(np.asarray(lower, float)), list(np.asarray(upper, float))]
        self._rng = np.random.RandomState(seed + 1).get_state()
        with self._own_rng():
            self.es = cma.CMAEvolutionStrategy(self.x0.tolist(), sigma0, opts)
        self.popsize = int(self.es.popsize)
        self.state = SearchState()
        self._pending: tuple[list[np.ndarray], float] | None = None
        self._load()

    # --- pycma's RNG stream, isolated from the rest of the process --------------------------------------------
    @contextmanager
    def _own_rng(self):
        outer = np.random.get_state()
        np.random.set_state(self._rng)
        try:
            yield
        finally:
            self._rng = np.random.get_state()
            np.random.set_state(outer)

    def _config(self) -> dict:
        return {"x0": self.x0.tolist(), "sigma0": self.sigma0, "popsize": self.popsize, "seed": self.seed,
                "lower": None if self.lower is None else np.asarray(self.lower, float).tolist(),
                "upper": None if self.upper is None else np.asarray(self.upper, float).tolist()}

    # --- ask / tell / done ------------------------------------------------------------------------------------
    def ask(self) -> list[np.ndarray]:
        with self._own_rng():
            xs = [np.asarray(x, dtype=np.float64) for x in self.es.ask()]
        self._pending = (xs, time.perf_counter())
        return xs

    def tell(self, xs: list[np.ndarray], scores: Sequence[float], **extra) -> dict:
        """Update pycma with the scores of the asked candidates; checkpoint; return the generation's log record
        (`extra` fields, e.g. validation re-scores, are added to it). `extra["told"]`, when there (a race's
        ranking, search/racing.py), is what pycma is told and replayed with in place of the scores."""
        if self._pending is None or len(xs) != len(self._pending[0]):
            raise RuntimeError("tell() takes the candidates of the preceding ask()")
        scores = [float(s) for s in scores]
        told = [float(s) for s in extra.get("told", scores)]
        self._tell_es(self._pending[0], told)
        st = self.state
        best = int(np.argmax(told))
        if scores[best] > st.best_fitness:
            st.best_fitness, st.best_x = scores[best], self._pending[0][best].tolist()
        st.generation += 1
        st.evals += len(xs)
        seconds = time.perf_counter() - self._pending[1]  # the generation's wall time, validation included
        st.seconds += seconds
        record = {"generation": st.generation, "evals": st.evals, "best": scores[best],
                  "mean": float(np.mean(scores)), "median": float(np.median(scores)), "sigma": float(self.es.sigma),
                  "best_x": self._pending[0][best].tolist(), "seconds": seconds, **extra}
        st.history.append(record)
        st.candidates.append([x.tolist() for x in self._pending[0]])
        st.scores.append(told)
        self._pending = None
        self._save()
        return record

    def _tell_es(self, xs: list[np.ndarray], scores: list[float]) -> None:
        with self._own_rng():
            self.es.tell(xs, [-s for s in scores])  # pycma minimises

    def stop_reason(self) -> dict:
        st, b = self.state, self.budget
        if st.generation >= b.max_generations:
            return {"budget": f"max_generations {b.max_generations}"}
        if b.max_evals is not None and st.evals >= b.max_evals:
            return {"budget": f"max_evals {b.max_evals}"}
        if b.wall_clock_s is not None and st.seconds >= b.wall_clock_s:
            return {"budget": f"wall_clock_s {b.wall_clock_s}"}
        spent = b.tokens(st.history)
        if b.max_tokens is not None and spent >= b.max_tokens:
            return {"budget": f"max_tokens {b.max_tokens} ({spent} spent)"}
        return self._strategy_stop()

    @property
    def parents(self) -> int:
        """pycma's μ: the candidates of a generation its update is made from."""
        return int(self.es.sp.weights.mu)

    def recommendation(self) -> np.ndarray:
        """CMA-ES's mean after the last generation told, within the bounds (pycma's xfavorite): under a noisy
        fitness a better estimate of the optimum than any one candidate's score."""
        x = np.asarray(self.es.result.xfavorite, dtype=np.float64)
        return x if self.lower is None else np.clip(x, self.lower, self.upper)

    def _strategy_stop(self) -> dict:
        reason = {k: v for k, v in dict(self.es.stop()).items()}
        recent = self.state.scores[-FLAT:]
        if len(recent) == FLAT and all(max(s) == min(s) for s in recent):
            reason["flat_fitness"] = f"every candidate scored alike in {FLAT} generations in a row"
        return reason

    def done(self) -> bool:
        """True once a budget is spent or pycma's `es.stop()` fires; the reason is logged and checkpointed."""
        reason = self.stop_reason()
        if not reason:
            self.state.stop = None  # a resumed search with a larger budget goes on
        elif self.state.stop is None:
            self.state.stop = json.loads(json.dumps(reason, default=str))
            logger.info("search stopped after generation %d: %s", self.state.generation,
                        ", ".join(f"{k} ({v})" for k, v in self.state.stop.items()))
            self._save()
        return bool(reason)

    # --- the loop's strategy surface (search/loop.py) -----------------------------------------------------------
    @property
    def generation(self) -> int:
        return self.state.generation

    def records(self) -> list[dict]:
        return self.state.history

    def engine_update(self, record: dict) -> None:
        return None  # the engine holds no state between candidates: nothing to replay or apply

    # --- checkpoint: JSON, resumed by replay ------------------------------------------------------------------
    def _save(self) -> None:
        if not self.out:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        st = self.state
        write_json_atomic(self.out / CHECKPOINT, {
            "format": FORMAT, "config": self._config(), "generation": st.generation, "evals": st.evals,
            "seconds": st.seconds, "best_x": st.best_x, "best_fitness": st.best_fitness, "stop": st.stop,
            "history": st.history, "candidates": st.candidates, "scores": st.scores}, indent=None)
        # Checkpoint first, then the log rewritten from it: a generation in the log is always in the checkpoint.
        self._write_log()

    def _write_log(self) -> None:
        write_text_atomic(self.out / LOG, "".join(json.dumps(r) + "\n" for r in self.state.history))

    def _load(self) -> None:
        path = self.out / CHECKPOINT if self.out else None
        if path is None or not path.is_file():
            return
        fix = "delete it (and generations.jsonl) to restart the search"
        data = read_json(path, fix)
        try:
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r}, expected {FORMAT}")
            if data["config"] != self._config():
                changed = [k for k in data["config"] if data["config"][k] != self._config().get(k)]
                raise DataError(f"{path}: made with other search settings ({', '.join(changed)}); {fix}")
            cands, scores, history = data["candidates"], data["scores"], data["history"]
            if not len(cands) == len(scores) == len(history) == data["generation"]:
                raise ValueError("generation counts disagree")
            for g, (want, sc) in enumerate(zip(cands, scores)):  # replay: pycma's exact state, no code loaded
                got = self.ask()
                if [x.tolist() for x in got] != want or len(sc) != len(got):
                    raise DataError(f"{path}: generation {g + 1} does not replay (another pycma or NumPy "
                                    f"version?); {fix}")
                self._tell_es(got, [float(s) for s in sc])
                self._pending = None
            st = self.state
            st.generation, st.evals, st.seconds = int(data["generation"]), int(data["evals"]), float(data["seconds"])
            st.best_x, st.best_fitness = data["best_x"], float(data["best_fitness"])
            st.history, st.candidates, st.scores, st.stop = history, cands, scores, data["stop"]
        except DataError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise DataError(f"{path}: not a valid search checkpoint ({exc}); {fix}") from None
        self._write_log()  # a kill between checkpoint and log left the log one generation behind
        logger.info("resuming search at generation %d from %s", self.state.generation, path)


class FixedWeights(CMASearch):
    """The prompt-only ablation of co-evolution (`coevolve.weights: fixed`): every candidate is the start x0, and
    pycma is never told, so only the prompts around it evolve. `vectors` per generation (enough to meet every prompt
    of the population once); the budget's generations are those that score as many vectors as the searched run."""

    def __init__(self, x0, *, vectors: int, budget: Budget, out: str | Path | None = None, seed: int = 0):
        self._vectors = vectors
        super().__init__(x0, 1.0, popsize=max(vectors, 2), seed=seed, budget=budget, out=out)  # pycma: never told

    def _load(self) -> None:
        self.popsize = self._vectors
        super()._load()

    def _config(self) -> dict:
        return {**super()._config(), "weights": "fixed"}

    def ask(self) -> list[np.ndarray]:
        xs = [self.x0.copy() for _ in range(self.popsize)]
        self._pending = (xs, time.perf_counter())
        return xs

    def _tell_es(self, xs: list[np.ndarray], scores: list[float]) -> None:
        pass

    def _strategy_stop(self) -> dict:
        return {}
