"""report.json: every evaluated row with what it cost (charged by rows/charge.py) and its paired differences to the
reference rows; `write_report` also writes report.md."""

from __future__ import annotations

from pathlib import Path

from hyper_es.cost import Cost
from hyper_es.directions.manifest import adapter_started
from hyper_es.report.markdown import report_markdown
from hyper_es.rows import names as row_names
from hyper_es.rundir import DIRECTIONS_DIR, LOG_FILE, REPORT_FILE, REPORT_MD, RESULT_FILE, SEARCH_DIR


def _read_log(path: Path) -> list[dict]:
    """The search's per-generation log (none: []); a damaged line raises DataError naming the file and line."""
    import json

    from hyper_es.errors import DataError

    if not path.is_file():
        return []
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        if not isinstance(rec, dict):
            raise DataError(f"{path}:{n}: not a JSON record; delete it and search/result.json, then re-run: the "
                            f"search writes it again from its checkpoint")
        out.append(rec)
    return out


def trained_tasks(recipe, tasks: list[str]) -> list[str]:
    """The evaluated tasks the directions were trained on: gradient.tasks, else every task with a train split."""
    trained = recipe.training_task_names()
    return [t for t in tasks if t in trained]


def run_report(recipe, run_dir: Path, rows: list[dict], *, B: int | None = None, seed: int | None = None) -> dict:
    """report.json: every evaluated row with its results and what it cost (steps, tokens, wall time), and each
    row's greedy difference to the GRPO-LoRA baseline and to the base with its paired bootstrap CI."""
    from hyper_es.evaluate import stats
    from hyper_es.io import read_json
    from hyper_es.rows import KINDS, PROMPTED, prompt_file
    from hyper_es.rows.charge import context

    run_dir = Path(run_dir)
    log = _read_log(run_dir / SEARCH_DIR / LOG_FILE)
    result = (read_json(run_dir / SEARCH_DIR / RESULT_FILE, "delete it to score the search's rows again (re-run)")
              if (run_dir / SEARCH_DIR / RESULT_FILE).is_file() else {})
    ctx = context(run_dir, rows, log, result)
    search = {"generations": len(log), "evals": result.get("evals"), "seconds": ctx.search.seconds,
              "tokens": ctx.search.search_tokens, "val_tokens": ctx.search.select_tokens,  # fitness; validation
              "rows": result.get("rows"), "scan": ctx.scan}
    out = []
    prompted = {r["name"]: read_json(prompt_file(run_dir, r["name"]), "re-run the evaluation to choose it again")
                for r in rows if row_names.is_prompted(r["name"])}  # chosen prompts, in full in the report
    for r in rows:
        weights = {**r, "name": row_names.weights_of(r["name"])}  # a <row>+prompt costs what its weights did
        cost = KINDS[r["kind"]].cost(run_dir, weights, ctx)
        if r["name"] in prompted and r["kind"] not in PROMPTED:  # a prompt control: + its scan on validation
            cost = cost + Cost(select_tokens=prompted[r["name"]]["tokens"], seconds=prompted[r["name"]]["seconds"])
        metrics = sorted({k for res in r["results"].values() for k in res if k == "greedy" or k.startswith("pass@")},
                         key=lambda k: (k != "greedy", int(k[5:]) if k.startswith("pass@") else 0))
        mean = {k: sum(res[k] for res in r["results"].values()) / len(r["results"]) for k in metrics
                if all(k in res for res in r["results"].values())}
        results = {t: {k: v for k, v in res.items() if k != "records"} for t, res in r["results"].items()}
        out.append({"name": r["name"], "kind": r["kind"], "optimizer_steps": cost.steps, "train_tokens": cost.train_tokens,
                    "search_tokens": cost.search_tokens, "select_tokens": cost.select_tokens, "tokens": cost.tokens,
                    "wall_s": cost.seconds,
                    "results": results, "mean": mean,
                    **({"val": r["val"]} if "val" in r else {})})
    e = recipe.eval
    tasks = sorted(rows[0]["results"]) if rows else []
    best = baseline_best(rows, adapter_started(run_dir / DIRECTIONS_DIR / "baseline"))
    if best:  # choosing it scored every candidate, whichever it is (the final adapter's row itself charges none)
        best.update(select_tokens=ctx.val["baseline"].select_tokens, select_s=ctx.val["baseline"].seconds)
    refs = {"baseline": "baseline", **({"baseline-best": best["name"]} if best else {}), "base": "base"}
    paired = paired_differences(rows, tasks, trained_tasks(recipe, tasks), B=B or stats.B_DEFAULT,
                                seed=stats.SEED_DEFAULT if seed is None else seed, refs=refs)
    return {"recipe": recipe.name, "model": recipe.model.name, "tasks": tasks, "splits": split_report(recipe),
            "eval": {"backend": e.backend, "k": e.k, "n": e.n or max(e.k), "temperature": e.temperature,
                     "limit": e.limit, "pass_k_limit": e.pass_k_limit, "greedy": "temperature 0, one completion"},
            "rows": out, "baseline_best": best, "paired": paired, "search": search,
            **({"prompts": prompted} if prompted else {})}


def split_report(recipe) -> dict:
    """Per task: each split's rows and distinct questions, and the questions each pair of splits shares."""
    from hyper_es.tasks import Task

    return {t.name: Task(t, recipe.base_dir).split_stats() for t in recipe.tasks}


def baseline_best(rows: list[dict], start: str | None = None) -> dict | None:
    """The GRPO-LoRA baseline's best adapter by validation (the base as step 0, or the given adapter `start` it was
    trained on top of; its snapshots and final; scored greedy on the search's validation rows by the final
    evaluation): early stopping, chosen without looking at test. Ties: fewer steps."""
    from hyper_es.evaluate.final import best_by_validation, early_stop_candidate

    scored = [r for r in rows if early_stop_candidate(r["kind"], r["name"], start) and "val" in r]
    if not any(r["kind"] == "baseline" for r in scored):  # no baseline trained (the recipe's own directions)
        return None
    best = best_by_validation(scored)
    return {"name": best["name"], "steps": best["steps"], "val": best["val"]["mean"],
            "rows": best["val"]["rows"], "candidates": {r["name"]: r["val"]["mean"] for r in scored}}


REFERENCES = {"baseline": "baseline", "base": "base"}  # label -> row name


def paired_differences(rows: list[dict], tasks: list[str], trained: list[str], *, B: int, seed: int,
                       refs: dict[str, str] | None = None) -> dict:
    """Greedy accuracy of every row minus each reference row (`refs`, label → row name: by default the GRPO-LoRA
    baseline and the base), per task and pooled, on the same problems (matched by id), with the paired bootstrap
    percentile 95% CI.

    Pooled: the mean over tasks of the per-task differences, every task weighing the same (as the report's `mean`),
    resampling problems within each task (stratified). `trained`: over the tasks the directions were trained on;
    `all`: over every evaluated task (only when that is another set), the difference of the `mean` column.
    Rows evaluated before per-problem records were kept have none: they are listed under `without_records`."""
    from hyper_es.evaluate import stats

    def greedy(row: dict, task: str):
        rec = row["results"].get(task, {}).get("records")
        return None if rec is None or "greedy" not in rec else (rec["ids"], rec["greedy"])

    have = {r["name"]: all(greedy(r, t) is not None for t in tasks) for r in rows}
    pooled = {"trained": trained} if trained else {}
    if set(tasks) != set(trained):
        pooled["all"] = tasks
    vs, by_name = {}, {r["name"]: r for r in rows}
    for label, ref in ((k, by_name[n]) for k, n in (refs or REFERENCES).items() if n in by_name and have[n]):
        vs[label] = {}
        for row in (r for r in rows if r["name"] != ref["name"] and have[r["name"]]):
            strata = {}
            for t in tasks:
                (a_ids, a), (b_ids, b) = greedy(row, t), greedy(ref, t)
                strata[t] = stats.align(a_ids, a, b_ids, b, what=f"{row['name']} vs {ref['name']}, {t}")
            vs[label][row["name"]] = {
                "tasks": {t: stats.paired_bootstrap([strata[t]], B=B, seed=seed).to_dict() for t in tasks},
                "pooled": {p: stats.paired_bootstrap([strata[t] for t in ts], B=B, seed=seed).to_dict()
                           for p, ts in pooled.items()}}
    return {"metric": "greedy", "difference": "row - reference, accuracy (0-1)", "B": B, "seed": seed,
            "references": {k: n for k, n in (refs or REFERENCES).items() if k in vs},
            "level": stats.LEVEL_DEFAULT, "ci": "percentile", "pooling": "mean over tasks, equal weights; "
            "problems resampled within each task", "pooled": pooled, "vs": vs,
            "without_records": [r["name"] for r in rows if not have[r["name"]]]}


def write_report(run_dir: Path, report: dict) -> None:
    from hyper_es.io import write_json_atomic

    write_json_atomic(Path(run_dir) / REPORT_FILE, report)
    (Path(run_dir) / REPORT_MD).write_text(report_markdown(report))
