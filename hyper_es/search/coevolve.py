"""Prompt–parameter co-evolution, a strategy of the one loop (search/loop.py) around another one (CMA-ES over the
coefficients, or ES over seeds).

Each generation pairs every parameter candidate of the inner strategy with `coevolve.pairs` prompts of a population
(a prompt: one `tasks/prompt_genome.Prompt` per task that has genes), drawn by a seeded shuffle, so that which
prompts a candidate meets does not depend on how good it is. A pair's fitness is the one reward on the one fitness
rows. The inner strategy is told each candidate's mean over its pairs; the prompt population keeps its `elite` best
by their mean over their pairs and fills up with seeded mutants and crossovers of them.

The prompt population and the pairing of a generation go into the inner strategy's own record (`tell(**extra)`), so
they are checkpointed with it, atomically, and a resumed run replays them from its records: a kill at any point
resumes to the same history. With no gene that can change, the population is the tasks' own prompts alone, and the
run is the parameter-only run.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from pathlib import Path

from hyper_es.errors import DataError
from hyper_es.io import write_json_atomic
from hyper_es.recipe.isolate import in_own_process
from hyper_es.tasks.prompt_genome import Prompt, TaskPrompts, task_prompts
from hyper_es.tasks.proposals import PROPOSALS, asked, propose, with_proposals

logger = logging.getLogger(__name__)
Genes = dict[str, Prompt]  # one prompt of the population: task name -> its genes


@dataclass(frozen=True)
class Pair:
    """A candidate of a co-evolution generation: the inner strategy's candidate and a prompt of the population."""

    x: object
    prompt: int


class Coevolution:
    """`ask()` Pairs, `tell(pairs, fitness, **extra)`, `done()`, `records()`, `engine_update(record)`: the inner
    strategy's, with the prompt population around it. `tasks(pair)`: the pair's tasks as prompted."""

    def __init__(self, inner, genomes: dict, tasks: list, cfg):
        self.inner, self.genomes, self.cfg = inner, genomes, cfg
        self.prompts = TaskPrompts(genomes, tasks)
        self.population = self._first()
        self._pending: tuple[list, list[list[int]]] | None = None
        for i, record in enumerate(inner.records()):  # replay: every told generation's prompts, then its selection
            where = f"the search's record {i + 1}"
            state = record.get("coevolve")
            if not isinstance(state, dict) or "population" not in state or "fitness" not in state:
                raise DataError(f"{where}: no co-evolution state (the run was not a co-evolution run); delete the "
                                f"search folder to start again")
            if [self._genes(p, where) for p in state["population"]] != self.population:
                raise DataError(f"{where}: the recorded prompt population is not the one this recipe's coevolve "
                                f"settings give; delete the search folder to start again")
            self.population = self._select(state["fitness"], i)

    @property
    def generation(self) -> int:
        return self.inner.generation

    def done(self) -> bool:
        return self.inner.done()

    def records(self) -> list[dict]:
        return self.inner.records()

    def engine_update(self, record: dict):
        return self.inner.engine_update(record)

    # --- ask / tell ---------------------------------------------------------------------------------------------
    def ask(self) -> list[Pair]:
        xs = self.inner.ask()
        rng = random.Random(f"{self.cfg.seed}:pairs:{self.generation}")
        m, n = min(self.cfg.pairs, len(self.population)), len(self.population)
        order = list(range(n))
        rng.shuffle(order)
        # candidate i meets m consecutive prompts of a shuffled cycle: every prompt is met as often as the others
        met = [[order[(i * m + k) % n] for k in range(m)] for i in range(len(xs))]
        self._pending = (xs, met)
        return [Pair(x, j) for x, js in zip(xs, met) for j in js]

    def tell(self, pairs: list[Pair], fitness: list[float], **extra) -> dict:
        if self._pending is None or len(pairs) != sum(map(len, self._pending[1])):
            raise RuntimeError("tell() takes the pairs of the preceding ask()")
        xs, met = self._pending
        fit = iter(float(f) for f in fitness)
        per_x = [[next(fit) for _ in js] for js in met]
        by_prompt: list[list[float]] = [[] for _ in self.population]
        for js, fs in zip(met, per_x):
            for j, f in zip(js, fs):
                by_prompt[j].append(f)
        prompt_fitness = [sum(fs) / len(fs) if fs else None for fs in by_prompt]
        best = max((j for j, f in enumerate(prompt_fitness) if f is not None), key=lambda j: prompt_fitness[j])
        state = {"population": [self.to_json(genes) for genes in self.population],
                 "pairs": met, "pair_fitness": per_x, "fitness": prompt_fitness, "best": best}
        self._pending = None
        record = self.inner.tell(xs, [sum(fs) / len(fs) for fs in per_x], coevolve=state, **extra)
        self.population = self._select(prompt_fitness, len(self.inner.records()) - 1)
        return record

    # --- the prompt population ----------------------------------------------------------------------------------
    def _first(self) -> list[Genes]:
        return self._fill([self.start()], random.Random(f"{self.cfg.seed}:init"))

    def _select(self, fitness: list[float | None], generation: int) -> list[Genes]:
        """The next population: the `elite` best (met prompts only, ties to the earlier), then their offspring."""
        ranked = sorted((j for j, f in enumerate(fitness) if f is not None), key=lambda j: -fitness[j])
        elite = [self.population[j] for j in ranked[: self.cfg.elite]]
        return self._fill(elite, random.Random(f"{self.cfg.seed}:select:{generation}"))

    def _fill(self, parents: list[Genes], rng: random.Random) -> list[Genes]:
        out = list(parents)
        for _ in range(20 * self.cfg.population):  # distinct prompts only; a small space may give fewer
            if len(out) >= self.cfg.population:
                break
            child = self._child(parents, rng)
            if child not in out:
                out.append(child)
        return out

    def _child(self, parents: list[Genes], rng: random.Random) -> Genes:
        a = rng.choice(parents)
        if len(parents) > 1 and rng.random() < 0.5:
            b = rng.choice([p for p in parents if p is not a])
            a = {t: self.genomes[t].crossover(a[t], b[t], rng) for t in a}
        movable = [t for t, g in self.genomes.items() if g.mutable()]
        if not movable:
            return dict(a)
        t = rng.choice(movable)
        return {**a, t: self.genomes[t].mutate(a[t], rng)}

    def _genes(self, data: dict, where: str) -> Genes:
        return self.prompts.from_json(data, where)

    # --- what the scorer needs (the prompt side: tasks/prompt_genome.TaskPrompts) --------------------------------
    def start(self) -> Genes:
        return self.prompts.start()

    def tasks_for(self, genes: Genes) -> list:
        return self.prompts.tasks_for(genes)

    def tasks(self, pair: Pair) -> list:
        return self.tasks_for(self.population[pair.prompt])

    def split(self, pairs: list[Pair]) -> tuple[list, list[list]]:
        """(candidates, tasks per candidate) for Scorer.score_many."""
        return [p.x for p in pairs], [self.tasks(p) for p in pairs]

    def to_json(self, genes: Genes) -> dict:
        return self.prompts.to_json(genes)

    def from_json(self, data: dict, where: str) -> Genes:
        return self.prompts.from_json(data, where)

    def describe(self, genes: Genes) -> dict:
        return self.prompts.describe(genes)

    def exported(self, genes: Genes) -> dict | None:
        return self.prompts.exported(genes)


def coevolution(recipe, inner, tasks: list) -> Coevolution:
    """The recipe's co-evolution around `inner`, over the prompt genes of those of `tasks` it names."""
    prompts = task_prompts(recipe, tasks)
    return Coevolution(inner, prompts.genomes, tasks, recipe.coevolve)


def proposed(recipe, run_dir, backend: str):
    """The recipe with the run's proposed template rewrites (`coevolve.tasks.<task>.propose`): asked for once, from
    the proposer served by `backend` (started and closed before the stage's own engine; in a child process of its
    own with `executor.isolate` on), then read from RUN/proposals.json."""
    if asked(recipe)["tasks"] and not (Path(run_dir) / PROPOSALS).is_file():
        in_own_process(recipe, "template proposals", ask_proposer, run_dir, backend)
    return with_proposals(recipe, run_dir)


def ask_proposer(recipe, run_dir, backend: str) -> None:
    """Serve the proposer, ask it for the recipe's template rewrites and write RUN/proposals.json."""
    from hyper_es.engine import make_generator, serve_kwargs

    ask, c, m = asked(recipe), recipe.coevolve, recipe.model
    own = c.proposer is None  # the recipe's model: its revision and dtype
    gen, tok = make_generator(backend, ask["model"], model_dtype=m.dtype if own else None, seed=ask["seed"],
                              revision=m.revision if own else None, serve=serve_kwargs(recipe),
                              trust_remote_code=m.trust_remote_code if own else False)
    try:
        record = propose(recipe, gen, tok)
    finally:
        gen.close()
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    write_json_atomic(Path(run_dir) / PROPOSALS, record)
    logger.info("proposer %s: %s", ask["model"], ", ".join(
        f"{t}: {len(r['kept'])} of {len(r['proposals'])} rewrites kept" for t, r in record["tasks"].items()))
