"""OpenAI-style ES over seeds as a strategy (search/loop.py): members θ + sᵢσ·ε(seedᵢ), z-normalised rewards, and
θ ← θ + α/(Nσ)·Σ zᵢ·sᵢ·ε(seedᵢ) as the engine update. The history (RUN/es/history.jsonl: seeds, signs, rewards, z,
σ, α per iteration) is the checkpoint: a resumed run replays its updates onto θ_0, bitwise, and goes on."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from hyper_es.es.history import HISTORY, read_history
from hyper_es.es.member import Member
from hyper_es.es.noise import member_seeds
from hyper_es.es.schedule import sigma_at
from hyper_es.es.update import normalise, signs
from hyper_es.io import write_text_atomic

logger = logging.getLogger(__name__)


class ESStrategy:
    def __init__(self, es, out: Path):
        """`es`: the recipe's ESConfig; `out`: RUN/es/."""
        self.c, self.path = es, Path(out) / HISTORY
        self.history = read_history(self.path, es.population)
        self._lines = [json.dumps(r) for r in self.history]
        self.spent = sum(r.get("tokens", 0) for r in self.history)
        self._pending: tuple | None = None
        self._budget_logged = False
        if self.history:
            logger.info("ES: resumed after %d iterations (replayed)", len(self.history))

    @property
    def generation(self) -> int:
        return len(self.history)

    def records(self) -> list[dict]:
        return self.history

    def engine_update(self, record: dict) -> tuple:
        return record["seeds"], record["z"], record["sigma"], record["alpha"], record["signs"]

    def done(self) -> bool:
        c, it = self.c, self.generation
        if it >= c.iterations:
            return True
        if c.max_tokens is not None and self.spent >= c.max_tokens:
            if not self._budget_logged:
                self._budget_logged = True
                logger.info("ES: token budget reached (%d >= es.max_tokens %d) after %d iterations", self.spent,
                            c.max_tokens, it)
            return True
        return False

    def ask(self) -> list[Member]:
        c, it = self.c, self.generation
        sigma = sigma_at(it, c.iterations, c.sigma, kind=c.sigma_schedule, sigma_min=c.sigma_min, warmup=c.warmup)
        seeds, sg = member_seeds(c.seed, it, c.population, antithetic=c.antithetic), signs(c.population, c.antithetic)
        self._pending = (seeds, sg, sigma)
        return [Member(seed, si * sigma) for seed, si in zip(seeds, sg)]

    def tell(self, members: list[Member], fitness: list[float], *, tokens: int = 0, **extra) -> dict:
        """Normalise the rewards, append the iteration to the history (written before the engine takes the step,
        so a kill in between replays it) and return its record."""
        if self._pending is None or len(members) != len(self._pending[0]):
            raise RuntimeError("tell() takes the members of the preceding ask()")
        (seeds, sg, sigma), self._pending = self._pending, None
        r = [float(v) for v in fitness]
        z = normalise(r, self.c.normalise).tolist()
        rec = {"iteration": self.generation, "seeds": seeds, "signs": sg, "rewards": r, "z": z, "sigma": sigma,
               "alpha": self.c.alpha, "tokens": tokens, "mean": sum(r) / len(r), "best": max(r), **extra}
        self._lines.append(json.dumps(rec))
        self.history.append(rec)
        self.spent += tokens
        write_text_atomic(self.path, "\n".join(self._lines) + "\n")
        return rec
