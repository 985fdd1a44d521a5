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
from hyper_es.tasks.prompt_genome import PROMPT_FILE


def prompted_row(folder: Path, row) -> list:
    """After a co-evolution (FOLDER/prompt.json): `row`'s weights with the co-evolved prompt, as <row>+prompt (the
    row itself keeps the tasks' own prompts); else nothing."""
    path = folder / PROMPT_FILE
    if not path.is_file():
        return []
    genes = read_json(path, f"delete it and {folder.name}/result.json to redo the {folder.name} stage")["genes"]
    return [replace(row, name=f"{row.name}+prompt", prompt=genes)]


def prompted(recipe: Recipe, tasks: list[Task], row, run_dir: Path) -> list[Task]:
    """`tasks` as the row's prompt renders them (the tasks' own prompts for a row without one), with the run's
    proposed template rewrites if the recipe asked for them."""
    if row.prompt is None:
        return tasks
    prompts, genes = _row_prompt(recipe, row, run_dir)
    by_name = {t.name: t for t in prompts.tasks_for(genes)}
    return [by_name[t.name] for t in tasks]


def own_prompts(recipe: Recipe, row, run_dir: Path) -> bool:
    """Whether a co-evolved prompt is every task's own (each gene at its start): the row then renders the same text
    as its weights' row, so it scores the same (measured: the same records and tokens) and is not scored again."""
    prompts, genes = _row_prompt(recipe, row, run_dir)
    return genes == prompts.start()


def _row_prompt(recipe: Recipe, row, run_dir: Path):
    """The row's co-evolved prompt: (the recipe's TaskPrompts, task -> Prompt)."""
    from hyper_es.tasks.prompt_genome import task_prompts
    from hyper_es.tasks.proposals import with_proposals

    if recipe.coevolve is None:
        raise DataError(f"row {row.name}: the run co-evolved a prompt ({PROMPT_FILE}), but the recipe has no "
                        f"coevolve section to render it; use the run's own recipe.yaml")
    recipe = with_proposals(recipe, run_dir)
    prompts = task_prompts(recipe, [Task(t, recipe.base_dir) for t in recipe.tasks])
    return prompts, prompts.from_json(row.prompt, f"row {row.name}'s {PROMPT_FILE}")


def prompt_controls(recipe: Recipe, rows: list, val: list[Task], out: Path, score, run_dir: Path) -> list:
    """`coevolve.controls`: each named row's weights with, per task, the best by validation of its own prompt and
    each prompt one gene away from it (`PromptGenome.neighbours`; ties: the own prompt, then the declared order), as
    <row>+prompt. Each candidate's scores go to eval/val/<row>+prompt@<task>-<i>.json, the choice (with the scan and
    its tokens and seconds) to eval/val/<row>+prompt.json (`rows.prompt_file`), so it resumes. `score(row, tasks)`: the
    row's greedy validation scores on those tasks (`validation_scores`)."""
    c = recipe.coevolve
    if c is None or not c.controls or not val:
        return []
    from hyper_es.tasks.prompt_genome import task_prompts
    from hyper_es.tasks.proposals import with_proposals

    prompts = task_prompts(with_proposals(recipe, run_dir), [Task(t, recipe.base_dir) for t in recipe.tasks])
    fixed = {r.name: r for r in rows if r.searched is None and r.kind not in PROMPTED}
    controls = []
    for name in c.controls:
        row = fixed.get(name)
        if row is None:
            raise DataError(f"coevolve.controls: '{name}' is not a tested row of this run that a search did not make "
                            f"(expected one of {', '.join(fixed)})")
        path = out / "val" / f"{name}+prompt.json"
        if not path.is_file():
            genes, scan, spent = prompts.start(), {}, []
            for task in (t for t in val if t.name in prompts.genomes):
                genome = prompts.genomes[task.name]
                cands = genome.neighbours()
                for i, p in enumerate(cands):
                    f = out / "val" / f"{name}+prompt@{task.name}-{i}.json"
                    if not f.is_file():
                        write_json_atomic(f, score(row, [genome.task(p)]))
                    spent.append(read_json(f, "delete it to score that prompt again"))
                scan[task.name] = [s["mean"] for s in spent[-len(cands):]]
                genes[task.name] = cands[max(range(len(cands)), key=lambda i: (scan[task.name][i], -i))]
            write_json_atomic(path, {"genes": prompts.to_json(genes), "prompt": prompts.describe(genes),
                                     "exported": prompts.exported(genes), "scan": scan,
                                     "tokens": sum(s["tokens"] for s in spent),
                                     "seconds": sum(s["seconds"] for s in spent)})
        genes = read_json(path, "delete it to choose that prompt again")["genes"]
        controls.append(replace(row, name=f"{name}+prompt", prompt=genes))
    return controls
