"""The rows of a final evaluation that carry a prompt other than the tasks' own: `<row>+prompt` after a co-evolution
(RUN/search or RUN/es prompt.json), and the prompt controls (`coevolve.controls`), whose one-gene prompt is chosen on
validation here; and the tasks as such a row's prompt renders them. A row is a `final.Row` (which imports this)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from hyper_es.errors import DataError
from hyper_es.io import read_json, write_json_atomic
from hyper_es.recipe import Recipe
from hyper_es.rows import PROMPTED
from hyper_es.tasks import Task
from hyper_es.tasks.prompt_genome import PROMPT_FILE, TaskPrompts, task_prompts
from hyper_es.tasks.proposals import with_proposals
from hyper_es.rows import names as row_names


def prompted_row(folder: Path, row) -> list:
    """After a co-evolution (FOLDER/prompt.json): `row`'s weights with the co-evolved prompt, as <row>+prompt (the
    row itself keeps the tasks' own prompts); else nothing."""
    path = folder / PROMPT_FILE
    if not path.is_file():
        return []
    genes = read_json(path, f"delete it and {folder.name}/result.json to redo the {folder.name} stage")["genes"]
    return [replace(row, name=row_names.prompted(row.name), prompt=genes)]


def run_prompts(recipe: Recipe, run_dir: Path) -> TaskPrompts | None:
    """The recipe's prompt genes per task, with the run's proposed template rewrites if the recipe asked for them;
    None without a coevolve section. Built once per evaluation: each genome reads its task's rows."""
    if recipe.coevolve is None:
        return None
    recipe = with_proposals(recipe, run_dir)
    return task_prompts(recipe, [Task(t, recipe.base_dir) for t in recipe.tasks])


def prompted(prompts: TaskPrompts | None, tasks: list[Task], row) -> list[Task]:
    """`tasks` as the row's prompt renders them (the tasks' own prompts for a row without one)."""
    if row.prompt is None:
        return tasks
    by_name = {t.name: t for t in prompts.tasks_for(_genes(prompts, row))}
    return [by_name[t.name] for t in tasks]


def own_prompts(prompts: TaskPrompts | None, row) -> bool:
    """Whether a row's prompt is every task's own (each gene at its start): the row then renders the same text as
    its weights' row, so it scores the same (measured: the same records and tokens) and is not scored again."""
    return row.prompt is not None and _genes(prompts, row) == prompts.start()


def _genes(prompts: TaskPrompts | None, row) -> dict:
    if prompts is None:
        raise DataError(f"row {row.name}: the run chose a prompt for it, but the recipe has no coevolve section to "
                        f"render it; use the run's own recipe.yaml")
    return prompts.from_json(row.prompt, f"row {row.name}'s prompt")


def prompt_controls(prompts: TaskPrompts | None, controls: list[str], rows: list, val: list[Task], out: Path,
                    score) -> list:
    """`coevolve.controls`: each named row's weights with, per task, the best by validation of its own prompt and
    each prompt one gene away from it (`PromptGenome.neighbours`; ties: the own prompt, then the declared order), as
    <row>+prompt. Each candidate's scores go to eval/val/<row>+prompt@<task>-<i>.json, the choice (with the scan and
    its tokens and seconds) to eval/val/<row>+prompt.json (`rows.prompt_file`), so it resumes. `score(row, tasks)`: the
    row's greedy validation scores on those tasks (`validation_scores`)."""
    if prompts is None or not controls or not val:
        return []
    fixed = {r.name: r for r in rows if r.searched is None and r.kind not in PROMPTED}
    made = []
    for name in controls:
        row = fixed.get(name)
        if row is None:
            raise DataError(f"coevolve.controls: '{name}' is not a tested row of this run that a search did not make "
                            f"(expected one of {', '.join(fixed)})")
        path = out / "val" / f"{name}+prompt.json"
        if not path.is_file():
            write_json_atomic(path, _choose(prompts, row, val, out / "val", score))
        genes = read_json(path, "delete it to choose that prompt again")["genes"]
        made.append(replace(row, name=row_names.prompted(name), prompt=genes))
    return made


def _choose(prompts: TaskPrompts, row, val: list[Task], folder: Path, score) -> dict:
    """Per validation task with prompt genes, the best candidate by its kept or new score."""
    genes, scan, spent = prompts.start(), {}, []
    for task in (t for t in val if t.name in prompts.genomes):
        genome = prompts.genomes[task.name]
        cands = genome.neighbours()
        for i, p in enumerate(cands):
            f = folder / f"{row.name}+prompt@{task.name}-{i}.json"
            if not f.is_file():
                write_json_atomic(f, score(row, [genome.task(p)]))
            spent.append(read_json(f, "delete it to score that prompt again"))
        scan[task.name] = [s["mean"] for s in spent[-len(cands):]]
        genes[task.name] = cands[max(range(len(cands)), key=lambda i: (scan[task.name][i], -i))]
    return {"genes": prompts.to_json(genes), "prompt": prompts.describe(genes), "exported": prompts.exported(genes),
            "scan": scan, "tokens": sum(s["tokens"] for s in spent), "seconds": sum(s["seconds"] for s in spent)}
