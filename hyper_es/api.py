"""The Python API's search in one call: CMA-ES over the merge coefficients of a DirectionSet, with what
`hyper-es search` gives (scale scan, validation guard, checkpoint and resume in `out`, best.json, the generations'
history), returning a result that exports.

    ds = hx.DirectionSet.from_adapters("HuggingFaceTB/SmolLM2-135M-Instruct", ["a", "b", "c"])
    res = hx.search_merge(ds, tasks=["chain_sum"], out="RUN", search={"max_generations": 4})
    res.export_hf("merged")
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from hyper_es.errors import ConfigError, DataError
from hyper_es.rundir import BEST_FILE, RESULT_FILE, SEARCH_DIR


@dataclass
class SearchResult:
    """A finished search: `x` over `genome` (the validation guard's choice), the rows it was compared with
    (`rows`: base, uniform, x0, hyper-es, each with its validation and test score), every generation's record
    (`history`) and the run folder `out`, which `hyper-es export OUT` also reads."""

    out: Path
    directions: Any  # DirectionSet
    genome: Any  # Genome
    x: np.ndarray
    settings: Any  # MergeSettings
    result: dict  # OUT/search/result.json
    history: list[dict]

    @property
    def rows(self) -> dict:
        return self.result["rows"]

    def table(self) -> str:
        """The coefficients found, one line per layer group."""
        return self.genome.table(self.x)

    def export_hf(self, out: str | Path) -> Path:
        """The merged model as a transformers folder (exact)."""
        from hyper_es.export import export_hf

        return export_hf(self.directions, self.genome, self.x, self.settings, out)

    def export_peft(self, out: str | Path, rank: int = 16, max_error: float | None = 0.01) -> dict:
        """The merged update as a PEFT LoRA adapter (truncated SVD), refused above `max_error` relative error (exact:
        task arithmetic at rank ≥ the directions' summed ranks). Returns the relative error per module."""
        from hyper_es.export import export_peft

        return export_peft(self.directions, self.genome, self.x, self.settings, out, rank=rank, max_error=max_error)

    def export_mergekit(self, out: str | Path) -> Path:
        """A mergekit YAML that reproduces the merge (PEFT-adapter and checkpoint directions only)."""
        from hyper_es.export import export_mergekit

        return export_mergekit(self.directions, self.genome, self.x, self.settings, out)


def _task_entries(tasks: list) -> list[dict]:
    from hyper_es.recipe import TaskConfig
    from hyper_es.tasks.builtin import builtin_tasks

    if isinstance(tasks, (str, dict, TaskConfig)):
        tasks = [tasks]
    builtin, out = builtin_tasks(), []
    for i, t in enumerate(tasks):
        if isinstance(t, str):
            if t not in builtin:
                raise DataError(f"tasks[{i}]: unknown task '{t}'; built-in tasks: {', '.join(builtin)} (or a task "
                                f"entry as in a recipe, or recipe=)")
            t = builtin[t]
        out.append(t.model_dump(mode="json") if isinstance(t, TaskConfig) else t)
    return out


def search_merge(directions, *, out: str | Path, tasks: list | None = None, recipe=None,
                 reward: Callable[[str, Any], float] | str | None = None, engine: str = "hf",
                 merge: dict | None = None, search: dict | None = None, fitness: dict | None = None) -> SearchResult:
    """Search layer-wise merge coefficients of `directions` (a DirectionSet) with CMA-ES, and return the result.

    Tasks: built-in task names or recipe task entries (`tasks=`), or a recipe (a Recipe or its path) whose model,
    tasks and sections are taken. `reward`: a registered name or `package.module:function`, or a callable
    `(completion, reference) -> float` (scored in this process), in place of each task's own. `engine`: hf or vllm.
    `merge`, `search` and `fitness`: fields of the recipe's `merge` (method, density, layer_group_size,
    module_groups, ...), `search` (popsize, max_generations, max_evals, wall_clock_s, scale_scan, ...) and `fitness`
    sections (minibatch, val_size, guard, seed, ...). Everything is kept in `out`: calling again with the same
    arguments resumes, then returns."""
    from hyper_es.directions import DirectionSet
    from hyper_es.directions.imported import write_imported
    from hyper_es.io import read_json
    from hyper_es.merging import Genome, recipe_genome
    from hyper_es.search.driver import LOG
    from hyper_es.search.run import search as run_search

    rec, callable_reward = _api_recipe(directions, tasks, recipe, reward, engine,
                                       {"merge": merge, "search": search, "fitness": fitness})
    zero = directions.zero_directions()
    if zero:
        raise DataError(f"directions: '{zero[0]}' is 0 in every tensor, so no coefficient of it can change the model; "
                        f"remove it")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"out: {out} exists and is not a folder; expected a folder (new, or one this call wrote)")
    write_imported(directions, out, [{"kind": "python", "origin": d.origin} for d in directions.directions])
    result = (read_json(out / SEARCH_DIR / RESULT_FILE, "delete it to search again")
              if (out / SEARCH_DIR / RESULT_FILE).is_file() else run_search(rec, out, backend=engine,
                                                                           reward=callable_reward))
    ds = DirectionSet.from_run(out)
    genome, x = Genome.from_json(out / SEARCH_DIR / BEST_FILE)
    log = out / SEARCH_DIR / LOG
    history = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return SearchResult(out, ds, genome, x, recipe_genome(rec, ds)[1], result, history)


def _api_recipe(directions, tasks, recipe, reward, engine: str, sections: dict):
    """(the recipe an API call runs, its callable reward or None): the tasks (names or entries) or a recipe, with
    `sections` ({section: fields}) laid over it, checked against the DirectionSet's base."""
    from hyper_es import models
    from hyper_es.directions import DirectionSet
    from hyper_es.recipe import Recipe, load_recipe, recipe_from_dict

    if not isinstance(directions, DirectionSet):
        raise ConfigError(f"directions: expected a DirectionSet (hx.DirectionSet.from_adapters(base, [folders])), "
                          f"got {type(directions).__name__}")
    if engine not in ("hf", "vllm"):
        raise ConfigError(f"engine: expected hf or vllm, got {engine!r}")
    if (tasks is None) == (recipe is None):
        raise ConfigError("expected tasks= (built-in task names or task entries) or recipe= (a Recipe or its path)")
    if recipe is not None:
        rec = recipe if isinstance(recipe, Recipe) else load_recipe(recipe)
        data, where = rec.model_dump(mode="json"), rec._path or "recipe"
    else:
        data, where = {"name": "search-merge", "model": {"name": directions.base}, "tasks": _task_entries(tasks)}, "<api>"
    if isinstance(reward, str):
        for t in data["tasks"]:
            t["reward"] = reward
    data["directions"] = None
    for key, fields in sections.items():
        if fields is not None and not isinstance(fields, dict):
            raise ConfigError(f"{key}: expected a dict of the recipe's {key} fields, got {type(fields).__name__}")
        data[key] = {**(data.get(key) or {}), **(fields or {})}
    data["eval"] = {**data.get("eval", {}), "backend": engine}
    rec = recipe_from_dict(data, where)
    if Path(models.resolve(rec.model.name, revision=rec.model.revision)).resolve() != Path(directions.base_path).resolve():
        raise DataError(f"directions: a set for the base '{directions.base}', the recipe's model is '{rec.model.name}'")
    return rec, reward if callable(reward) else None


def compose(directions, *, out: str | Path, tasks: list | None = None, recipe=None, reward: str | None = None,
            engine: str = "hf", merges: tuple[str, ...] = ("task_arithmetic", "ties"), gradfit: dict | None = None,
            merge: dict | None = None, search: dict | None = None, fitness: dict | None = None,
            eval: dict | None = None) -> dict:  # noqa: A002 - the recipe's section name
    """Compose adapters you already have for a target reward, with the controls: `search_merge`, then each adapter
    alone, each of `merges` at mergekit's defaults times one lambda chosen on validation (`eval.merges`; the search's
    `scale_scan` gives the lambdas), with `gradfit` (a dict of the recipe's gradfit fields, {} for its defaults) the
    same genome fitted by GRPO, and the base and uniform merge; every row evaluated on the tasks' test splits.
    Returns the report (also OUT/report.json and report.md). `reward`: a registered name or
    `package.module:function` (every row is scored with it). Calling again resumes."""
    from hyper_es.recipe import Recipe, load_recipe, recipe_from_dict
    from hyper_es.report.final import evaluate_and_report
    from hyper_es.search.grad_fit import fit

    if callable(reward):
        raise ConfigError("reward: compose scores every row in its final evaluation, which takes a reward name or "
                          "'package.module:function', not a callable")
    given = recipe if isinstance(recipe, Recipe) or recipe is None else load_recipe(recipe)
    if merges and not (search or {}).get("scale_scan") and not (given and given.search.scale_scan):
        search = {**(search or {}), "scale_scan": [0.25, 0.5, 0.75, 1.0, 1.5]}  # the lambdas, unless set already
    rec, _ = _api_recipe(directions, tasks, given, reward, engine,
                         {"merge": merge, "search": search, "fitness": fitness,
                          "eval": {**(eval or {}), "merges": list(merges)}})
    if gradfit is not None:
        rec = recipe_from_dict({**rec.model_dump(mode="json"), "gradfit": gradfit}, rec._path or "<api>")
    search_merge(directions, out=out, recipe=rec, engine=engine)
    if rec.gradfit is not None:
        fit(rec, out)
    return evaluate_and_report(rec, Path(out), engine)
