"""The prompt genome of one task (prompt–parameter co-evolution): a prompt is a few genes, each an index into the
alternatives the recipe declares (`coevolve.tasks.<task>`), with the task's own prompt as gene 0 everywhere, so the
recipe's prompt is the start. Few-shot examples are train rows the genome picks (never validation or test rows).

Mutation and crossover take a `random.Random`, so a seeded history replays to the same prompts; a `Prompt` is plain
data (`to_json` / `from_json`), and `PromptGenome.task(prompt)` is the task that renders it.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass

from hyper_es.errors import DataError, HyperESError
from hyper_es.recipe import PromptSpace
from hyper_es.tasks import prompts

GENES = ("system", "template", "format", "shots", "tools")
PROMPT_FILE = "prompt.json"  # RUN/search/prompt.json: the co-evolved prompt of the hyper-es+prompt row


@dataclass(frozen=True)
class Prompt:
    """Indices into a PromptGenome's alternatives (0: the task's own), and the few-shot examples as indices into its
    shot pool (None: the task's own per-row draw, `prompt.few_shot` examples)."""

    system: int = 0
    template: int = 0
    format: int = 0
    shots: tuple[int, ...] | None = None
    tools: int = 0  # an environment task's tool descriptions

    def to_json(self) -> dict:
        return {"system": self.system, "template": self.template, "format": self.format,
                "shots": None if self.shots is None else list(self.shots), **({"tools": self.tools} if self.tools else {})}

    @classmethod
    def from_json(cls, data: dict, where: str) -> Prompt:
        if not isinstance(data, dict) or not set(GENES[:4]) <= set(data) <= set(GENES):
            raise DataError(f"{where}: a prompt is an object with {', '.join(GENES[:4])} and, where not 0, tools")
        ints = {g: data.get(g, 0) for g in (*GENES[:3], "tools")}  # tools: only where not 0
        shots = data["shots"]
        if not all(type(v) is int for v in ints.values()) or not (
                shots is None or isinstance(shots, list) and all(type(v) is int for v in shots)):
            raise DataError(f"{where}: system, template, format and tools are integers, shots a list of integers or "
                            f"null")
        return cls(**ints, shots=None if shots is None else tuple(shots))


class PromptGenome:
    """The genes of one task's prompt: its own system turn, template and (no) format line first, then the space's
    alternatives; up to `max_shots` few-shot examples drawn from its train rows."""

    def __init__(self, task, space: PromptSpace):
        own = task.cfg.prompt
        self.base = task
        self.systems = _first(own.system, space.systems)
        self.templates = _first(own.template, space.templates)
        self.formats = _first("", space.formats)
        self.tools = _first({}, space.tools)
        self.max_shots = space.max_shots
        self.pool = task.rows("train") if space.max_shots or own.few_shot else []
        held = {r.get("question") for s in ("val", "test") if getattr(task.cfg, s) for r in task.rows(s)}
        if any(r.get("question") in held for r in self.pool):  # Task.rows keeps train apart; this says so
            raise DataError(f"task '{task.name}': the few-shot pool shares questions with validation or test")

    def start(self) -> Prompt:
        """The task's own prompt."""
        return Prompt(shots=None if self.base.cfg.prompt.few_shot else ())

    def check(self, p: Prompt, where: str) -> Prompt:
        sizes = {g: len(alts) for g, alts in self.alternatives().items()}
        for gene, n in sizes.items():
            if not 0 <= getattr(p, gene) < n:
                raise DataError(f"{where}: {gene} {getattr(p, gene)} is not one of the {n} alternatives")
        if p.shots is not None and (len(p.shots) > self.max_shots or len(set(p.shots)) != len(p.shots)
                                    or any(not 0 <= i < len(self.pool) for i in p.shots)):
            raise DataError(f"{where}: shots must be at most {self.max_shots} distinct indices of the "
                            f"{len(self.pool)} train rows")
        return p

    def alternatives(self) -> dict[str, list]:
        """Each gene but the few-shot examples: its alternatives, the task's own first."""
        return {"system": self.systems, "template": self.templates, "format": self.formats, "tools": self.tools}

    def mutable(self) -> list[str]:
        """The genes with more than one value."""
        out = [g for g, alts in self.alternatives().items() if len(alts) > 1]
        return out + (["shots"] if self.max_shots and len(self.pool) > 1 else [])

    def neighbours(self) -> list[Prompt]:
        """The task's own prompt, then every prompt one system turn, template, format line or set of tool
        descriptions away from it (the few-shot examples as its own): the candidates of a prompt control."""
        own = self.start()
        return [own] + [_replace(own, **{g: i}) for g, alts in self.alternatives().items() for i in range(1, len(alts))]

    def mutate(self, p: Prompt, rng: random.Random) -> Prompt:
        """One gene changed: another system turn, template, format line or tool descriptions, or one few-shot example
        added, removed or swapped for another train row. A prompt with no gene that can change is returned as it is."""
        genes = self.mutable()
        if not genes:
            return p
        gene = rng.choice(genes)
        if gene != "shots":
            n = len(self.alternatives()[gene])
            return _replace(p, **{gene: rng.choice([i for i in range(n) if i != getattr(p, gene)])})
        shots = list(self._own_draw(rng) if p.shots is None else p.shots)
        ops = (["add"] if len(shots) < min(self.max_shots, len(self.pool)) else []) + (
            ["remove", "swap"] if shots else [])
        op = rng.choice(ops)
        if op == "remove":
            shots.pop(rng.randrange(len(shots)))
        else:
            new = rng.choice([i for i in range(len(self.pool)) if i not in shots])
            if op == "add":
                shots.insert(rng.randrange(len(shots) + 1), new)
            else:
                shots[rng.randrange(len(shots))] = new
        return _replace(p, shots=tuple(shots))

    def crossover(self, a: Prompt, b: Prompt, rng: random.Random) -> Prompt:
        """Each gene from one of the two parents (the few-shot examples as one gene)."""
        return Prompt(**{g: getattr(a if rng.random() < 0.5 else b, g) for g in GENES})

    def _own_draw(self, rng: random.Random) -> list[int]:
        """Explicit examples standing in for the task's per-row draw when its shots first mutate."""
        k = min(self.base.cfg.prompt.few_shot, self.max_shots, len(self.pool))
        return rng.sample(range(len(self.pool)), k)

    def task(self, p: Prompt):
        """The task that renders prompt `p` (same rows, reward and settings; its own Task object)."""
        own = self.base.cfg.prompt
        fmt = self.formats[p.format].replace("{", "{{").replace("}", "}}")  # a format line is literal text
        update = {"system": self.systems[p.system],
                  "template": self.templates[p.template] + (f"\n{fmt}" if fmt else "")}
        if p.shots is not None:
            update["few_shot"] = len(p.shots)
        view = copy.copy(self.base)
        view.cfg = self.base.cfg.model_copy(update={"prompt": own.model_copy(update=update)})
        view.fixed_shots = None if p.shots is None else [self.pool[i] for i in p.shots]
        view.tool_texts = self.tools[p.tools] or None
        view.prompt_key = p  # what a Scorer caches this view's token ids under
        return view

    def describe(self, p: Prompt) -> dict:
        """The prompt in full, for the report and the export: the texts and the few-shot rows."""
        shots = None if p.shots is None else [{"id": self.pool[i].get("id"), "question": self.pool[i].get("question")}
                                              for i in p.shots]
        return {"genes": p.to_json(), "system": self.systems[p.system], "template": self.templates[p.template],
                "format": self.formats[p.format], "shots": shots,
                **({"tools": self.tools[p.tools]} if self.base.environment is not None else {})}


    def exported(self, p: Prompt) -> dict:
        """The prompt as plain data to serve it with: the system turn, the few-shot turns already filled in, the user
        template, and whether it goes through the chat template. `render_exported` turns it and a row into the
        exact text that was scored (for any row that is not one of its examples)."""
        view = self.task(p)
        cfg = view.cfg.prompt
        if p.shots is None and cfg.few_shot:
            raise HyperESError(f"task '{self.base.name}': this prompt draws its few-shot examples per row (the "
                               f"recipe's prompt.few_shot), which a fixed prompt cannot hold")
        where = f"task '{self.base.name}'"
        shots = [{"user": prompts.fill(cfg.template, r, where), "assistant": prompts.fill(cfg.shot_answer, r, where)}
                 for r in view.fixed_shots or []]
        return {"system": cfg.system, "shots": shots, "template": cfg.template, "chat": cfg.chat,
                **({"tools": view.tool_schemas()} if view.environment is not None else {})}


class TaskPrompts:
    """The prompt genomes of the tasks a recipe co-evolves, together: a prompt (task name -> `Prompt`) to and from
    plain data, in full, for export, and the tasks as it prompts them."""

    def __init__(self, genomes: dict[str, PromptGenome], tasks: list):
        self.genomes, self.base_tasks = genomes, tasks

    def start(self) -> dict[str, Prompt]:
        """The tasks' own prompts."""
        return {t: g.start() for t, g in self.genomes.items()}

    def tasks_for(self, genes: dict[str, Prompt]) -> list:
        """The tasks as prompted by `genes` (tasks without genes as they are)."""
        return [self.genomes[t.name].task(genes[t.name]) if t.name in genes else t for t in self.base_tasks]

    def to_json(self, genes: dict[str, Prompt]) -> dict:
        return {t: p.to_json() for t, p in genes.items()}

    def from_json(self, data: dict, where: str) -> dict[str, Prompt]:
        """A recorded prompt, checked against these genomes (one clear error naming `where`)."""
        if not isinstance(data, dict) or set(data) != set(self.genomes):
            raise DataError(f"{where}: a recorded prompt names the tasks {sorted(self.genomes)}")
        return {t: self.genomes[t].check(Prompt.from_json(d, f"{where}, task {t}"), where) for t, d in data.items()}

    def describe(self, genes: dict[str, Prompt]) -> dict:
        """A prompt in full, per task: the texts and the few-shot rows."""
        return {t: self.genomes[t].describe(p) for t, p in genes.items()}

    def exported(self, genes: dict[str, Prompt]) -> dict | None:
        """A prompt to serve, per task (PromptGenome.exported); None where a task draws its examples per row."""
        try:
            return {t: self.genomes[t].exported(p) for t, p in genes.items()}
        except HyperESError:
            return None


def task_prompts(recipe, tasks: list) -> TaskPrompts:
    """The recipe's prompt genes (`coevolve.tasks`) over those of `tasks` they name; every named task must be there."""
    by_name = {t.name: t for t in tasks}
    missing = sorted(set(recipe.coevolve.tasks) - set(by_name))
    if missing:
        raise DataError(f"coevolve.tasks: {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not among the "
                        f"tasks scored here ({', '.join(by_name)})")
    return TaskPrompts({n: PromptGenome(by_name[n], space) for n, space in recipe.coevolve.tasks.items()}, tasks)


def render_exported(exported: dict, row: dict, tokenizer) -> str:
    """The prompt text of an exported prompt (`PromptGenome.exported`) for `row` (its fields fill the template)."""
    msgs = [{"role": "system", "content": exported["system"]}] if exported["system"] else []
    for shot in exported["shots"]:
        msgs += [{"role": "user", "content": shot["user"]}, {"role": "assistant", "content": shot["assistant"]}]
    msgs.append({"role": "user", "content": prompts.fill(exported["template"], row, "the exported prompt")})
    return prompts.render(tokenizer, msgs, exported["chat"])


def _first(own, alternatives: list) -> list:
    """The task's own value, then the distinct alternatives that differ from it, in order (dicts compared by value)."""
    out = [own]
    for a in alternatives:
        if a not in out:
            out.append(a)
    return out


def _replace(p: Prompt, **genes) -> Prompt:
    return Prompt(**{**{g: getattr(p, g) for g in GENES}, **genes})
