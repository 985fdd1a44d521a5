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

import random
from dataclasses import dataclass

from hyper_es.errors import DataError
from hyper_es.tasks.prompt_genome import Prompt

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
        self.inner, self.genomes, self.base_tasks, self.cfg = inner, genomes, tasks, cfg
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
        if not isinstance(data, dict) or set(data) != set(self.genomes):
            raise DataError(f"{where}: a recorded prompt names the tasks {sorted(self.genomes)}")
        return {t: self.genomes[t].check(Prompt.from_json(d, f"{where}, task {t}"), where) for t, d in data.items()}

    # --- what the scorer needs ----------------------------------------------------------------------------------
    def start(self) -> Genes:
        """The tasks' own prompts."""
        return {t: g.start() for t, g in self.genomes.items()}

    def tasks_for(self, genes: Genes) -> list:
        """The tasks as prompted by `genes` (tasks without genes as they are)."""
        return [self.genomes[t.name].task(genes[t.name]) if t.name in genes else t for t in self.base_tasks]

    def tasks(self, pair: Pair) -> list:
        return self.tasks_for(self.population[pair.prompt])

    def split(self, pairs: list[Pair]) -> tuple[list, list[list]]:
        """(candidates, tasks per candidate) for Scorer.score_many."""
        return [p.x for p in pairs], [self.tasks(p) for p in pairs]

    def to_json(self, genes: Genes) -> dict:
        return {t: p.to_json() for t, p in genes.items()}

    def from_json(self, data: dict, where: str) -> Genes:
        return self._genes(data, where)

    def describe(self, genes: Genes) -> dict:
        """A prompt in full, per task: the texts and the few-shot rows."""
        return {t: self.genomes[t].describe(p) for t, p in genes.items()}

    def exported(self, genes: Genes) -> dict | None:
        """A prompt to serve, per task (PromptGenome.exported); None where a task draws its examples per row."""
        from hyper_es.errors import HyperESError

        try:
            return {t: self.genomes[t].exported(p) for t, p in genes.items()}
        except HyperESError:
            return None


def coevolution(recipe, inner, tasks: list) -> Coevolution:
    """The recipe's co-evolution around `inner`, over the prompt genes of those of `tasks` it names."""
    from hyper_es.tasks.prompt_genome import PromptGenome

    cfg = recipe.coevolve
    by_name = {t.name: t for t in tasks}
    missing = sorted(set(cfg.tasks) - set(by_name))
    if missing:
        raise DataError(f"coevolve.tasks: {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not searched "
                        f"(search.tasks: {', '.join(by_name)})")
    return Coevolution(inner, {n: PromptGenome(by_name[n], space) for n, space in cfg.tasks.items()}, tasks, cfg)
