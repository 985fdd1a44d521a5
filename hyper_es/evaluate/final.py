"""The final evaluation of a run: every model worth comparing, on every held-out test set, with one resident engine.

Rows: the base; each direction alone; the uniform merge; the GRPO-LoRA baseline (and its snapshots, for the
accuracy-vs-steps curve); Hyper-ES. All of them are genomes over one DirectionSet (the search's directions first,
so their DARE masks are the search's, then the baseline's adapters), with one density per direction: raw
adapters (a direction alone, the baseline) are merged at density 1 with coefficient 1/λ, which is base + ΔW
exactly. So one engine serves every row, re-merged in place, as in the search.

Each row's results are written to RUN/eval/<row>.json as soon as they exist; a re-run skips finished rows. Per task
they keep, besides the aggregates, per-problem records for paired comparisons (`hyper_es.evaluate.stats`):
`{"ids": [...], "greedy": [0/1 ...]}`, and for Pass@k rows `"n"` (samples per problem) and `"correct"` (how many
of them were correct), for the first `len(correct)` problems (`eval.pass_k_limit`). A completion is correct when its
reward is >= 1, as in `evaluate_task`.

The base, the baseline and its snapshots are also scored greedy on the search's validation rows
(RUN/eval/val/<row>.json), so the report can name the baseline's best adapter by validation (early stopping; the
base is its step 0) without looking at test. The `scaled` control (base + s·ΔW of the baseline, s chosen on the
same validation rows from the search's scale scan) is chosen there too.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hyper_es.directions import DirectionSet
from hyper_es.directions.jobs import SNAPSHOTS
from hyper_es.engine import inplace_engine
from hyper_es.errors import DataError
from hyper_es.evaluate.runner import EvalJob, evaluate_tasks
from hyper_es.directions.manifest import adapter_started, read_manifest, read_record
from hyper_es.directions.set import load_direction
from hyper_es.io import read_json, write_json_atomic, write_text_atomic
from hyper_es.merging import Genome, genome_for, recipe_genome
from hyper_es.recipe import Recipe
from hyper_es.es.history import es_start
from hyper_es.rows import KINDS, start_genome
from hyper_es.tasks import Task
from hyper_es.evaluate.prompted import own_prompts, prompt_controls, prompted, prompted_row, run_prompts
from hyper_es.rundir import BEST_FILE, DIRECTIONS_DIR, ES_DIR, EVAL_DIR, GRADFIT_DIR, MANIFEST_FILE, RESULT_FILE, SEARCH_DIR
from hyper_es.rows import names as row_names

logger = logging.getLogger(__name__)


@dataclass
class Row:
    name: str
    kind: str  # a kind of the row registry (rows/kinds.py): base, direction, uniform, baseline, …
    weights: dict[str, float] = field(default_factory=dict)  # one weight per direction (all layers)
    searched: tuple[Genome, np.ndarray] | None = None  # the search's genome and vector (Hyper-ES, from best.json)
    raw: bool = False  # adapters merged as trained (density 1), not with the search's merge settings
    steps: int | None = None  # optimizer steps spent to make this model
    prompt: dict | None = None  # a co-evolved prompt (task -> genes: RUN/search or RUN/es prompt.json); None: own

    def __post_init__(self):
        if self.kind not in KINDS:  # a row the registry cannot cost, build or sample is a bug: fail where it is made
            raise KeyError(f"row '{self.name}': kind '{self.kind}' is not in the row registry (rows/kinds.py)")

    @property
    def pass_k(self) -> bool:
        """Also sample n completions for Pass@k: the registry's word for the row's kind."""
        return KINDS[self.kind].pass_k


def eval_set(run_dir: Path, *, load: bool = True) -> tuple[DirectionSet | None, list[str], dict[int, Path]]:
    """Search directions, then the baseline and its snapshots, then ES's dense updates; returns (that set, the
    search's direction names, {step: snapshot}). A `method: es` run has no search directions. `load=False` reads
    only the manifests (the set is None): enough to plan the rows."""
    from hyper_es.directions.manifest import finished_jobs

    found = finished_jobs(run_dir)
    jobs = [Path(f) for f, _ in found]
    folders, names = list(jobs), [m["name"] for _, m in found]
    baseline = run_dir / DIRECTIONS_DIR / "baseline"
    snapshots = {}
    if (baseline / MANIFEST_FILE).is_file():
        folders.append(baseline)
        names.append("baseline")
        for snap in sorted((baseline / SNAPSHOTS).glob("step-*"), key=lambda p: int(p.name[5:])):
            snapshots[int(snap.name[5:])] = snap
            folders.append(snap)
            names.append(row_names.snapshot(int(snap.name[5:])))
    bases = {m["base"]["name"] for m in [*(m for _, m in found), read_manifest(baseline)] if m is not None}
    if len(bases) != 1:
        raise DataError(f"{run_dir}: expected finished jobs on one base under directions/, found bases {sorted(bases)}")
    if not load:
        return None, names[:len(jobs)], snapshots
    ds = DirectionSet(bases.pop(), [load_direction(f, n) for f, n in zip(folders, names)])
    if (run_dir / ES_DIR / RESULT_FILE).is_file():  # full-parameter ES: its update as one dense direction
        from hyper_es.directions.sources import Dense, Direction
        from hyper_es.es.delta import es_delta
        from hyper_es.es.history import grpo_folder
        from hyper_es.rows import es_grpo_delta

        dense = {"es": es_delta(run_dir, ds.base_path)[0]}
        if read_manifest(grpo_folder(run_dir)) is not None:  # ES → GRPO-LoRA
            dense["es+grpo"] = es_grpo_delta(run_dir, ds.base)
        ds = DirectionSet(ds.base, [*ds.directions, *(Direction(n, {t: Dense(v) for t, v in d.items()},
                                                                 origin=str(run_dir / ES_DIR)) for n, d in dense.items())],
                          validate=False)
    return ds, names[:len(jobs)], snapshots


def plan_rows(run_dir: Path, search_names: list[str], snapshots: dict[int, Path]) -> list[Row]:
    manifests = {n: read_record(run_dir / DIRECTIONS_DIR / n) for n in search_names}
    total = sum(m["optimizer_steps"] for m in manifests.values())
    rows = [Row("base", "base", steps=0)]
    # A snapshot increment alone is not a model anyone trained (and the first one is a baseline snapshot): skipped.
    rows += [Row(n, "direction", {n: 1.0}, raw=True, steps=manifests[n]["optimizer_steps"]) for n in search_names
             if "derived_from" not in manifests[n]]
    if search_names:
        rows.append(Row("uniform", "uniform", {n: 1.0 / len(search_names) for n in search_names}, steps=total))
    baseline = run_dir / DIRECTIONS_DIR / "baseline" / MANIFEST_FILE
    if baseline.is_file():
        steps = read_manifest(baseline.parent)["optimizer_steps"]
        start = adapter_started(baseline.parent)  # trained on top of a given adapter: its rows are base + both
        if start is not None and start not in search_names:
            raise DataError(f"{baseline}: the baseline trained on top of adapter '{start}', which is not among the "
                            f"run's directions ({', '.join(search_names) or 'none'})")
        on = {start: 1.0} if start else {}
        rows += [Row(row_names.snapshot(s), "baseline-snapshot", {**on, row_names.snapshot(s): 1.0}, raw=True, steps=s)
                 for s in snapshots]
        rows.append(Row("baseline", "baseline", {**on, "baseline": 1.0}, raw=True, steps=steps))
    if (run_dir / ES_DIR / RESULT_FILE).is_file():  # ES takes no gradient steps; a sequenced start's are its
        start = es_start(run_dir)
        steps = 0 if start == "base" else {r.name: r.steps for r in rows}.get(start, total)  # hyper-es: its directions
        name = row_names.es_row(start)
        rows.append(Row(name, "es", {"es": 1.0}, raw=True, steps=steps))
        rows += prompted_row(run_dir / ES_DIR, rows[-1])
        grpo = read_manifest(run_dir / ES_DIR / "grpo")
        if grpo is not None:  # ES → GRPO-LoRA
            rows.append(Row(row_names.es_grpo_row(start), "es-grpo", {"es+grpo": 1.0}, raw=True,
                            steps=steps + grpo["optimizer_steps"]))
    best = run_dir / SEARCH_DIR / BEST_FILE
    if best.is_file():
        genome, x = Genome.from_json(best)
        if x is None:
            raise DataError(f"{best}: the genome has no values; delete it and search/result.json to redo the search")
        rows.append(Row("hyper-es", "hyper-es", searched=(genome, x), steps=total))
        rows[-1:] = prompted_row(run_dir / SEARCH_DIR, rows[-1]) + rows[-1:]
        start = start_genome(run_dir)
        if start is not None:  # what the search adds over its own start (the scanned scale of x0)
            rows.append(Row("search-start", "search-start", searched=start, steps=total))
    fitted = run_dir / GRADFIT_DIR / BEST_FILE
    if fitted.is_file() and (run_dir / GRADFIT_DIR / RESULT_FILE).is_file():  # the search's genome fitted by gradient
        steps = read_json(run_dir / GRADFIT_DIR / RESULT_FILE, "delete the gradfit folder to fit again")["steps"]
        rows.append(Row("grad-fit", "grad-fit", searched=Genome.from_json(fitted), steps=total + steps))
    return rows


def row_vector(row: Row, genome: Genome, search_names: list[str], density: float, lam: float) -> np.ndarray:
    """The row as a vector of the eval genome (densities per direction, or per layer group and direction).
    Hyper-ES takes the coefficients and the densities of the genome it was searched with (best.json)."""
    named = dict.fromkeys(genome.keys, 0.0)
    dens: dict = {d: (1.0 if row.raw else density) for d in search_names}
    if row.searched is not None:
        searched, x = row.searched
        named.update(searched.coefficients(x))
        # keyed as the eval genome's density genes are: per layer group for the paper's genome, else per direction
        dens.update(searched.layer_densities(x, density) if searched.per_layer_density
                    else searched.densities(x, density))
    for key in genome.keys:
        if key[1] in row.weights:
            named[key] = row.weights[key[1]] / (lam if row.raw else 1.0)
    return genome.vector(named, dens)


# Scored on validation too (eval/val/<row>.json): the baseline's candidates for early stopping, the base as step 0.
BASELINE_KINDS = ("base", "baseline", "baseline-snapshot")


def early_stop_candidate(kind: str, name: str, start: str | None) -> bool:
    """A candidate of the baseline's early stop: its snapshots and final, and its step 0: the base, or the given
    adapter it was trained on top of (`start`: `gradient.baseline_start`; then the base is not one)."""
    step0 = "direction" if start else "base"
    return kind in ("baseline", "baseline-snapshot", step0) and row_names.baseline_candidate(name, start)


VALIDATED = (*BASELINE_KINDS, "scaled", "merge")  # rows with eval/val/<row>.json


def has_val(kind: str, name: str, given: bool = False) -> bool:
    """Whether a row's eval/val/<row>.json is its validation score: a validated kind's own weights and prompts (a
    prompt control's file there is its prompt scan, not a score of the weights' selection). `given`: the run's
    directions are given adapters, each also scored on validation (which is best alone: composition's control)."""
    return (kind in VALIDATED or (given and kind == "direction")) and not row_names.is_prompted(name)
FIRST = ("hyper-es", "search-start", "grad-fit", "es", "scaled", "baseline-snapshot", "baseline", "base")  # test order; the rest after, in turn


def evaluate_run(recipe: Recipe, run_dir: str | Path, *, backend: str | None = None, test: bool = True) -> list[dict]:
    """Evaluate every row (resuming), and return their results in row order. `test=False`: only the baseline
    rows' validation scores (to choose a learning rate or a snapshot before anything else is evaluated); returns
    those, as {"name", "kind", "steps", "val"} per baseline row."""
    run_dir = Path(run_dir)
    out = run_dir / EVAL_DIR
    (out / "val").mkdir(parents=True, exist_ok=True)
    m, e = recipe.merge, recipe.eval
    backend = backend or e.backend
    _, search_names, snapshots = eval_set(run_dir, load=False)  # the adapters and ES replay only if a row is left
    rows = plan_rows(run_dir, search_names, snapshots)
    val = validation_tasks(recipe)
    # given adapters: each one's validation score, to choose one (adapter-further), or the one the baseline started
    # from (charged to its early stop); not in a plain baseline's lr grid (test=False), which never reads them
    given = recipe.directions is not None and (test or recipe.gradient.baseline_start is not None)
    start = adapter_started(run_dir / DIRECTIONS_DIR / "baseline")  # its step 0 in place of the base
    val_todo = [r for r in rows if val and (early_stop_candidate(r.kind, r.name, start) or (
        given and r.kind == "direction")) and not (out / "val" / f"{r.name}.json").is_file()]
    held: list = []  # the engine, started on first use

    def engine_for(row: Row):
        if not held:
            # The layout of the searched genome (best.json), else the recipe's; one density per direction.
            ds = with_merges(recipe, eval_set(run_dir)[0], search_names)
            layout, settings = recipe_genome(recipe, ds)
            layout = next((r.searched[0] for r in rows if r.searched is not None), layout)
            genome = genome_for(ds, layer_group_size=layout.layer_group_size, module_groups=layout.module_groups,
                                per_direction_density=not layout.per_layer_density,
                                per_layer_density=layout.per_layer_density)
            engine, tok = inplace_engine(recipe, backend, ds, genome, settings, out / "engine", seed=e.seed,
                                         stage="final-evaluation engine")
            engine.show_progress = True
            held.extend([engine, tok, genome])
        engine, tok, genome = held
        engine.set_genome(row_vector(row, genome, search_names, m.density, m.lam))
        return engine, tok

    try:
        for row in val_todo:
            scores = validation_scores(*engine_for(row), val, recipe.fitness.val_size)
            logger.info("validation %s: %.3f %s", row.name, scores["mean"], json.dumps(scores["tasks"]))
            write_json_atomic(out / "val" / f"{row.name}.json", scores)
        scaled = scaled_row(recipe, rows, val, out, engine_for) if test else None
        rows += ([scaled] if scaled else []) + (merge_rows(recipe, rows, val, out, engine_for) if test else [])
        candidates = [r for r in rows if early_stop_candidate(r.kind, r.name, start)]  # each, tested below or not
        if e.snapshots == "best" and val:  # test only the baseline's best snapshot by validation (and its final)
            best = best_by_validation([{"name": r.name, "steps": r.steps, "val": read_val(out, r.name)}
                                       for r in candidates])
            rows = [r for r in rows if r.kind != "baseline-snapshot" or r.name == best["name"]
                    or (out / f"{r.name}.json").is_file()]  # rows already scored stay in the report
        wanted = any(r.prompt is not None for r in rows) or (recipe.coevolve and recipe.coevolve.controls)
        prompts = run_prompts(recipe, run_dir) if test and wanted else None  # none read unless a row needs them
        if test:  # coevolve.controls: fixed rows with the best one-gene prompt by validation
            rows += prompt_controls(prompts, recipe.coevolve.controls if prompts else [], rows, val, out,
                                    lambda row, ts: validation_scores(*engine_for(row), ts, recipe.fitness.val_size))
        tasks = [Task(t, recipe.base_dir) for t in recipe.tasks if t.test is not None]
        # The searched rows and their closest controls first: a run cut short has its headline comparison done.
        own = {r.name for r in rows if own_prompts(prompts, r)}
        todo = sorted((r for r in rows if test and not (out / f"{r.name}.json").is_file()),
                      key=lambda r: (FIRST.index(r.kind) if r.kind in FIRST else len(FIRST), r.name in own))
        for row in todo:
            twin = out / f"{row_names.weights_of(row.name)}.json"
            if row.name in own and twin.is_file():  # the same weights and prompts: the same scores, not re-scored
                write_row(out / f"{row.name}.json", {**read_row(twin), "name": row.name, "same_as": twin.stem})
                continue
            results = score_test_sets(*engine_for(row), prompted(prompts, tasks, row), e, pass_k=row.pass_k)
            logger.info("eval %s: %s", row.name, json.dumps(
                {t: {k: v for k, v in res.items() if k != "records"} for t, res in results.items()}))
            write_row(out / f"{row.name}.json", {"name": row.name, "kind": row.kind, "steps": row.steps,
                                                 "results": results})
    finally:
        if held:
            held[0].close()
    if not test:
        return [{"name": r.name, "kind": r.kind, "steps": r.steps, "val": read_val(out, r.name)}
                for r in candidates if val]
    return [{**read_row(out / f"{r.name}.json"),
             **({"val": read_val(out, r.name)} if has_val(r.kind, r.name, given) and val else {})}
            for r in rows]


def scaled_row(recipe: Recipe, rows: list[Row], val: list[Task], out: Path, engine_for) -> Row | None:
    """The `scaled` control: base + s·ΔW of the baseline's final adapter, s chosen on validation (`chosen_scale`)."""
    baseline = next((r for r in rows if r.kind == "baseline"), None)
    if baseline is None or not recipe.search.scale_scan or not val:
        return None
    return chosen_scale(recipe, "scaled", "baseline", baseline.steps, val, out, engine_for)


def merge_rows(recipe: Recipe, rows: list[Row], val: list[Task], out: Path, engine_for) -> list[Row]:
    """`eval.merges`: each merge-<method> control, the directions' merge at mergekit's defaults (a dense direction
    of the evaluation's set, `with_merges`) times one lambda chosen on validation."""
    steps = next((r.steps for r in rows if r.kind == "uniform"), None)
    return [chosen_scale(recipe, row_names.merged(m), row_names.merged(m), steps, val, out, engine_for, kind="merge")
            for m in (recipe.eval.merges if val else [])]


def with_merges(recipe: Recipe, ds: DirectionSet, search_names: list[str]) -> DirectionSet:
    """The evaluation's set with each `eval.merges` method's merge of the search directions as a dense direction."""
    from hyper_es.directions.sources import Dense, Direction
    from hyper_es.merging import unit_merge

    if not recipe.eval.merges:
        return ds
    searched = DirectionSet(ds.base, [ds[n] for n in search_names], validate=False)  # already loaded, not read again
    extra = [Direction(row_names.merged(m), {t: Dense(d) for t, d in unit_merge(searched, m, recipe.merge.seed).items()},
                       origin="eval.merges") for m in recipe.eval.merges]
    return DirectionSet(ds.base, [*ds.directions, *extra], validate=False)


def chosen_scale(recipe: Recipe, name: str, direction: str, steps: int | None, val: list[Task], out: Path,
                 engine_for, kind: str = "scaled") -> Row:
    """Row `name`: base + s·ΔW of `direction`, s from the search's `scale_scan`, chosen on the validation rows (ties:
    the scale nearest 1). Each scale's scores are kept in eval/val/<name>@<s>.json and the choice in
    eval/val/<name>.json (with the tokens and seconds of the whole scan), so it resumes."""
    scales = recipe.search.scale_scan
    path = out / "val" / f"{name}.json"
    if not path.is_file():
        scan = {}
        for sc in scales:
            f = out / "val" / f"{name}@{sc:g}.json"
            if not f.is_file():
                row = Row(f"{name}@{sc:g}", kind, {direction: sc}, raw=True, steps=steps)
                write_json_atomic(f, validation_scores(*engine_for(row), val, recipe.fitness.val_size))
            scan[sc] = read_json(f, "delete it to score that scale again")
        top = max(v["mean"] for v in scan.values())
        best = min((sc for sc, v in scan.items() if v["mean"] == top), key=lambda sc: abs(sc - 1.0))
        logger.info("%s: %s -> scale %g", name, ", ".join(f"{sc:g}: {v['mean']:.3f}" for sc, v in scan.items()),
                    best)
        write_json_atomic(path, {**scan[best], "scale": best, "scan": {f"{sc:g}": v["mean"] for sc, v in scan.items()},
                                 "tokens": sum(v["tokens"] for v in scan.values()),
                                 "seconds": sum(v["seconds"] for v in scan.values())})
    scale = read_json(path, "delete it to scan the scales again")["scale"]
    return Row(name, kind, {direction: scale}, raw=True, steps=steps)


def score_test_sets(engine, tok, tasks: list[Task], e, *, pass_k: bool) -> dict:
    """One row on every test set, in one engine call: greedy with per-problem records; with `pass_k`, also n samples
    per problem (on the first `eval.pass_k_limit` problems) for Pass@k at every k = 1…n (the recipe's k are reported
    by name)."""
    n = e.n or max(e.k)
    limit = min(filter(None, (e.limit, e.pass_k_limit)), default=None)
    sampled = [t for t in tasks if pass_k and (e.pass_k_tasks is None or t.name in e.pass_k_tasks)]
    jobs = [EvalJob(t, limit=e.limit) for t in tasks]
    jobs += [EvalJob(t, ks=tuple(range(1, n + 1)), limit=limit,
                     sampling=t.sampling(n=n, temperature=e.temperature, top_p=e.top_p, seed=e.seed)) for t in sampled]
    done = evaluate_tasks(engine, tok, jobs)
    results = {}
    for task, greedy in zip(tasks, done[: len(tasks)], strict=True):
        results[task.name] = {"greedy": greedy.pass_at[1], "problems": greedy.problems, "tokens": greedy.tokens,
                              "records": greedy_records(greedy.records)}
    for task, res in zip(sampled, done[len(tasks):], strict=True):
        row = results[task.name]
        row.update({f"pass@{k}": res.pass_at[k] for k in e.k}, n=n, temperature=e.temperature,
                   pass_k_problems=res.problems, tokens=row["tokens"] + res.tokens,
                   pass_curve=[res.pass_at[k] for k in range(1, n + 1)])
        rec = row.pop("records")  # records last: the file reads top down
        row["records"] = {**rec, **sampled_records(res.records, rec["ids"])}
    return results


def best_by_validation(rows: list[dict]) -> dict | None:
    """The row (with "name", "steps", "val") of highest validation mean; ties: fewer steps."""
    return max(rows, key=lambda r: (r["val"]["mean"], -(r["steps"] or 0)), default=None)


def validation_tasks(recipe: Recipe) -> list[Task]:
    """The tasks whose validation rows the search's guard used (fitness.tasks, else every task with a val split)."""
    names = recipe.searched_task_names()
    return [Task(recipe.task(n), recipe.base_dir) for n in names if recipe.task(n).val is not None]


def validation_scores(engine, tok, tasks: list[Task], size: int) -> dict:
    """Greedy accuracy on each task's first `size` validation rows (the search's val_size) and their mean."""
    res = evaluate_tasks(engine, tok, [EvalJob(t, split="val", limit=size) for t in tasks])
    per = {r.task: r.pass_at[1] for r in res}
    return {"tasks": per, "mean": sum(per.values()) / len(per), "rows": size,
            "tokens": sum(r.tokens for r in res), "seconds": sum(r.seconds for r in res)}


def greedy_records(records: list[dict]) -> dict:
    """Per-problem ids and greedy correctness (0/1) from `TaskResult.records` of a one-completion run."""
    return {"ids": [r["id"] for r in records], "greedy": [int(r["scores"][0] >= 1.0) for r in records]}


def sampled_records(records: list[dict], ids: list[str]) -> dict:
    """Samples per problem (`n`: one number when every problem has the same) and how many were correct, in the
    order of the greedy records' `ids`."""
    if [r["id"] for r in records] != ids[: len(records)]:
        raise DataError("the sampled and greedy evaluations saw different problems (the task's rows changed?)")
    ns = [len(r["scores"]) for r in records]
    return {"n": ns[0] if len(set(ns)) == 1 else ns, "correct": [sum(s >= 1.0 for s in r["scores"]) for r in records]}


def write_row(path: Path, data: dict) -> None:
    """RUN/eval/<row>.json: indented JSON, each per-problem list on one line (ids and small ints: compact)."""
    marks, results = {}, {}
    for task, res in data["results"].items():
        if "records" in res:
            marks[task] = f"\0records:{task}"
            res = {**res, "records": marks[task]}
        results[task] = res
    text = json.dumps({**data, "results": results}, indent=1)
    for task, mark in marks.items():
        rec = data["results"][task]["records"]
        lines = ",\n".join(f"    {json.dumps(k)}: {json.dumps(v)}" for k, v in rec.items())
        text = text.replace(json.dumps(mark), "{\n" + lines + "\n   }", 1)
    write_text_atomic(path, text)


def read_val(out: Path, name: str) -> dict:
    path = out / "val" / f"{name}.json"
    data = read_json(path, "delete it to score this row on validation again")
    if not (isinstance(data, dict) and isinstance(data.get("mean"), (int, float)) and isinstance(data.get("rows"), int)):
        raise DataError(f"{path}: not a validation score (expected mean, rows, tasks); delete it to score again")
    return data


def read_row(path: Path) -> dict:
    fix = "delete it to evaluate this row again"
    data = read_json(path, fix)
    if not (isinstance(data, dict) and {"name", "kind", "steps", "results"} <= set(data)):
        raise DataError(f"{path}: not an evaluation row (expected name, kind, steps, results); {fix}")
    for task, res in data["results"].items():  # rows evaluated before records were kept have none: still valid
        rec = res.get("records") if isinstance(res, dict) else None
        if rec is None:
            continue
        ids = rec.get("ids") if isinstance(rec, dict) else None
        greedy, correct = (rec.get("greedy"), rec.get("correct", [])) if isinstance(rec, dict) else (None, None)
        if not (isinstance(ids, list) and isinstance(greedy, list) and len(greedy) == len(ids)
                and isinstance(correct, list) and len(correct) <= len(ids)
                and len(ids) == res.get("problems", len(ids))):
            raise DataError(f"{path}: {task}: damaged per-problem records (ids, greedy and correct must be lists "
                            f"of one entry per problem); {fix}")
    return data


def row_values(run_dir: str | Path, row: str, task: str, metric: str = "greedy") -> tuple[list, list[float]]:
    """(problem ids, per-problem values) of an evaluated row, for paired comparisons: greedy correctness, or
    `pass@k`, the unbiased estimate from the row's samples (on the problems that were sampled)."""
    from hyper_es.evaluate.passk import pass_at_k

    path = Path(run_dir) / EVAL_DIR / f"{row}.json"
    rec = (read_row(path)["results"].get(task) or {}).get("records")
    if rec is None:
        raise DataError(f"{path}: no per-problem records for task '{task}'; delete it to evaluate the row again")
    if metric == "greedy":
        return rec["ids"], rec["greedy"]
    if not rec.get("correct"):
        raise DataError(f"{path}: task '{task}' has no sampled records, so no {metric}")
    k = int(metric.removeprefix("pass@"))
    ns = rec["n"] if isinstance(rec["n"], list) else [rec["n"]] * len(rec["correct"])
    return rec["ids"][:len(rec["correct"])], [pass_at_k(n, c, k) for n, c in zip(ns, rec["correct"])]
