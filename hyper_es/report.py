"""Human-readable result tables (rich) for evaluation results."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from hyper_es.evaluate.runner import TaskResult
from hyper_es.cost import Cost


def _print(table: Table, console: Console | None) -> None:
    console = console or Console(width=None if Console().is_terminal else 140)
    console.print(table)


def directions_table(folders: Sequence[Path], console: Console | None = None) -> Table:
    """One row per finished direction: a gradient-stage job from its manifest, an imported one with its origin."""
    from hyper_es.directions.manifest import read_record

    table = Table(title="directions")
    for col in ("name", "steps", "lr", "seed", "shard", "completions", "first reward", "last reward", "s"):
        table.add_column(col, justify="left" if col == "name" else "right")
    for folder in folders:
        m = read_record(folder)
        if m.get("imported"):  # a given direction: where it came from, no training in this run
            table.add_row(f"{m['name']} (imported: {Path(m['imported']['path']).name})", "0", "", "", "", "", "", "", "0")
            continue
        curve = [r for _, r in m["reward_curve"]]
        job = m["job"]
        table.add_row(m["name"], str(m["optimizer_steps"]), f"{job['learning_rate']:.2g}", str(job["seed"]),
                      "all" if job["shard"] is None else f"{job['shard']}/{job['num_shards']}", str(m["completions"]),
                      f"{curve[0]:.3f}" if curve else "", f"{curve[-1]:.3f}" if curve else "",
                      f"{m['wall_seconds']:.0f}")
    _print(table, console)
    return table


def results_table(results: Sequence[TaskResult], title: str = "", console: Console | None = None) -> Table:
    ks = sorted({k for r in results for k in r.pass_at})
    table = Table(title=title)
    for col in ("task", "split", "problems", "n", "temp", *[f"pass@{k}" for k in ks], "mean reward", "tokens", "s"):
        table.add_column(col, justify="left" if col in ("task", "split") else "right")
    for r in results:
        table.add_row(
            r.task, r.split, str(r.problems), str(r.n), f"{r.temperature:g}",
            *[f"{r.pass_at[k]:.3f}" if k in r.pass_at else "" for k in ks],
            f"{r.mean_reward:.3f}", str(r.tokens), f"{r.seconds:.1f}",
        )
    _print(table, console)
    return table


def geometry_table(geom: dict, console: Console | None = None) -> Table:
    """Pairwise cosine similarity of the directions, their norms, and the span's effective rank."""
    names = geom["names"]
    table = Table(title=f"direction geometry: effective rank {geom['effective_rank']:.2f} of {len(names)}")
    table.add_column("direction")
    table.add_column("‖ΔW‖", justify="right")
    for n in names:
        table.add_column(f"cos {n}", justify="right")
    for n, row in zip(names, geom["cosine"]):
        table.add_row(n, f"{geom['norm'][n]:.4g}", *[f"{c:+.3f}" for c in row])
    _print(table, console)
    return table


# --- the run report (`hyper-es run`) -------------------------------------------------------------------------------
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
    log = _read_log(run_dir / "search" / "generations.jsonl")
    ctx = context(run_dir, rows, log)
    result = (read_json(run_dir / "search" / "result.json", "delete it to score the search's rows again (re-run)")
              if (run_dir / "search" / "result.json").is_file() else {})
    search = {"generations": len(log), "evals": result.get("evals"), "seconds": ctx.search.seconds,
              "tokens": ctx.search.search_tokens, "val_tokens": ctx.search.select_tokens,  # fitness; validation
              "rows": result.get("rows"), "scan": ctx.scan}
    out = []
    prompted = {r["name"]: read_json(prompt_file(run_dir, r["name"]), "re-run the evaluation to choose it again")
                for r in rows if r["name"].endswith("+prompt")}  # chosen prompts, in full in the report
    for r in rows:
        weights = {**r, "name": r["name"].removesuffix("+prompt")}  # a <row>+prompt costs what its weights did
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
    best = baseline_best(rows)
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


def splits_markdown(splits: dict) -> list[str]:
    body = [[name, st["partition"], *[f"{st['splits'][s]['distinct']:,} / {st['splits'][s]['rows']:,}"
                                      if s in st["splits"] else "–" for s in ("train", "val", "test")],
             ", ".join(f"{k} {v}" for k, v in st["overlap"].items()) or "–"] for name, st in splits.items()]
    return ["## Splits", "", "Distinct questions / rows per split, and the questions two splits share (partition "
            "`question`: each distinct question is in one split, by a hash of its text).", "",
            *_md_tables(["task", "partition", "train", "val", "test", "shared questions"], body)]


def baseline_best(rows: list[dict]) -> dict | None:
    """The GRPO-LoRA baseline's best adapter by validation (the base as step 0, its snapshots and final, scored
    greedy on the search's validation rows by the final evaluation): early stopping, chosen without looking at
    test. Ties: fewer steps."""
    from hyper_es.evaluate.final import BASELINE_KINDS, best_by_validation

    scored = [r for r in rows if r["kind"] in BASELINE_KINDS and "val" in r]
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


WIDTH = 120  # report.md tables and the console table fit in this many columns


def _fmt(v, digits=3) -> str:
    return "—" if v is None else f"{v:.{digits}f}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v)


def _fmt_diff(d: dict | None) -> str:
    """A difference and its CI in points (×100, one decimal): "+1.0 [-2.0, 4.0]"."""
    if d is None:
        return "—"
    diff, low, high = (round(100 * d[k], 1) + 0.0 for k in ("diff", "low", "high"))  # + 0.0: no "-0.0"
    return f"{diff:+.1f} [{low:.1f}, {high:.1f}]"


def _md_tables(head: list[str], body: list[list[str]], width: int = WIDTH, left: int = 1) -> list[str]:
    """Padded markdown tables (the first `left` columns left-aligned, the others right-aligned), no wider than
    `width`: the columns after the first are split over as many tables as needed, each repeating the first."""
    w = [max(len(c) for c in col) for col in zip(head, *body)]
    groups, cur = [], []
    for j in range(1, len(head)):
        if cur and w[0] + 4 + sum(w[i] + 3 for i in cur) + w[j] + 3 > width:
            groups.append(cur)
            cur = []
        cur.append(j)
    groups.append(cur)
    def line(cells: list[str], cols: list[int]) -> str:
        return "| " + " | ".join(cells[i].ljust(w[i]) if i < left else cells[i].rjust(w[i]) for i in cols) + " |"

    lines = []
    for g in groups:
        cols = [0, *g]
        lines += [*([""] * bool(lines)), line(head, cols),
                  "|" + "|".join(":" + "-" * (w[i] + 1) if i < left else "-" * (w[i] + 1) + ":" for i in cols) + "|",
                  *(line(cells, cols) for cells in body)]
    return lines


def _greedy_columns(report: dict) -> tuple[list[str], list[list[str]]]:
    """Cost and greedy accuracy per task (and the mean over tasks) of every row."""
    mean = any("greedy" in r["mean"] for r in report["rows"]) and len(report["tasks"]) > 1
    head = ["model", "steps", "train tokens", "search tokens", "select tokens", "wall s", *report["tasks"],
            *(["mean"] * mean)]
    body = [[r["name"], _fmt(r["optimizer_steps"]), _fmt(r["train_tokens"]), _fmt(r["search_tokens"]),
             _fmt(r.get("select_tokens")), _fmt(r["wall_s"], 0),
             *[_fmt(r["results"].get(t, {}).get("greedy")) for t in report["tasks"]],
             *([_fmt(r["mean"].get("greedy"))] * mean)] for r in report["rows"]]
    return head, body


def _paired_columns(report: dict, ref: str) -> tuple[list[str], list[list[str]]]:
    paired = report.get("paired") or {}
    pooled = list(paired.get("pooled", {}))
    head = ["model", *report["tasks"], *[f"pooled: {p}" for p in pooled]]
    body = [[name, *[_fmt_diff(d["tasks"].get(t)) for t in report["tasks"]],
             *[_fmt_diff(d["pooled"].get(p)) for p in pooled]]
            for name, d in paired.get("vs", {}).get(ref, {}).items()]
    return head, body


def report_markdown(report: dict) -> str:
    e = report["eval"]
    limit = f" (first {e['limit']} problems each)" if e["limit"] else ""
    lines = [f"# {report['recipe']}: {report['model']}", "",
             f"Held-out test sets{limit}. greedy: one "
             f"completion at temperature 0; pass@k: unbiased estimate from n={e['n']} samples at temperature "
             f"{e['temperature']:g}.", "", "## Greedy accuracy", "", *_md_tables(*_greedy_columns(report))]
    ks = [f"pass@{k}" for k in e["k"]]
    sampled = [r for r in report["rows"] if any(k in res for res in r["results"].values() for k in ks)]
    if sampled:
        body = [[r["name"], t, *[_fmt(res.get(m)) for m in ("greedy", *ks)]]
                for r in sampled for t, res in [*((t, r["results"].get(t, {})) for t in report["tasks"]),
                                                 *([("mean", r["mean"])] * (len(report["tasks"]) > 1))]]
        subset = f"First {e['pass_k_limit']} problems of each test set. " if e.get("pass_k_limit") else ""
        lines += ["", "## Pass@k", "", *([subset, ""] if subset else []), *_md_tables(["model", "task", "greedy", *ks], body, left=2)]
    paired = report.get("paired")
    if paired:
        pooled = "; ".join(f"{p}: {', '.join(ts)}" for p, ts in paired["pooled"].items())
        best = (report.get("baseline_best") or {}).get("name")
        for ref, title in (("baseline", "the GRPO-LoRA baseline (final adapter)"),
                           ("baseline-best", f"the GRPO-LoRA baseline's best adapter by validation ({best})"),
                           ("base", "the base model")):
            if ref not in paired["vs"]:
                continue
            lines += ["", f"## Paired differences vs {ref}", "",
                      f"Greedy accuracy of each row minus {title}, in points (×100), on the same problems: "
                      f"Δ [95% CI], paired bootstrap percentile interval ({paired['B']:,} resamples of the "
                      f"problems, seed {paired['seed']}). Pooled: the mean over tasks, each weighing the same, "
                      f"problems resampled within each task ({pooled}).", "",
                      *_md_tables(*_paired_columns(report, ref))]
        if paired["without_records"]:
            lines += ["", f"No per-problem records (evaluated before they were kept), so no paired differences "
                          f"for: {', '.join(paired['without_records'])}. Delete their eval/<row>.json and re-run "
                          f"to evaluate them again."]
    if report.get("splits"):
        lines += ["", *splits_markdown(report["splits"])]
    for row, prompt in (report.get("prompts") or {}).items():
        lines += ["", *prompt_markdown(row, prompt["prompt"], scan=prompt.get("scan"))]
    s = report["search"]
    if s["generations"]:
        lines += ["", f"Search: {s['generations']} generations, {s['evals']} candidates, {_fmt(s['tokens'])} tokens, "
                  f"{_fmt(s['seconds'], 0)} s."]
    return "\n".join(lines) + "\n"


def prompt_markdown(row: str, prompt: dict, scan: dict | None = None) -> list[str]:
    """A co-evolved prompt, or a prompt control's choice (with its `scan`), in full, per task (PromptGenome.describe)."""
    lines = [f"## The co-evolved prompt ({row})", ""] if scan is None else [
        f"## The chosen prompt ({row})", "", "Per task, the best by validation of the task's own prompt and each "
        "prompt one gene away (scores in that order: " + "; ".join(
            f"{t}: {', '.join(f'{v:.3f}' for v in s)}" for t, s in scan.items()) + "):", ""]
    for task, p in prompt.items():
        shots = p["shots"]
        lines += [f"- **{task}** (genes {json.dumps(p['genes'])}):",
                  f"  - system: {json.dumps(p['system'])}", f"  - template: {json.dumps(p['template'])}",
                  f"  - format line: {json.dumps(p['format'])}",
                  "  - few-shot examples: " + ("drawn per row, as the task's prompt.few_shot" if shots is None else
                                               "; ".join(f"{s['id']}: {json.dumps(s['question'])}" for s in shots)
                                               or "none")]
    return lines


CONSOLE_WIDTH = 100  # the console summary: one row per model in this many columns (report.md has the details)


def report_table(report: dict, console: Console | None = None) -> Table:
    """The console summary, one row per model within CONSOLE_WIDTH columns: its cost (optimizer steps, generated
    tokens for training plus search or ES, wall seconds), greedy accuracy (the mean over tasks) and the pooled greedy
    difference to the GRPO-LoRA baseline (the base in a run without one) with its paired bootstrap 95% CI. Per-task
    tables: report.md."""
    if console is None and not Console().is_terminal:
        console = Console(width=CONSOLE_WIDTH)  # logs and CI
    paired = report.get("paired") or {}
    pooled = next(iter(paired.get("pooled", {})), None)
    ref = "baseline" if any(r["name"] == "baseline" for r in report["rows"]) else "base"  # no baseline trained
    vs = paired.get("vs", {}).get(ref, {})
    table = Table(title=f"{report['recipe']}: greedy accuracy on test, details in report.md")
    heads = ["model", "steps", "tokens", "wall s", "greedy", f"Δ {ref} ({pooled or 'pooled'}), 95% CI"]
    for c in heads:
        table.add_column(c, justify="left" if c == "model" else "right", no_wrap=True)
    for r in report["rows"]:
        tokens = r.get("tokens")
        greedy = r["mean"].get("greedy") if r["mean"] else next(
            (res.get("greedy") for res in r["results"].values()), None)
        diff = (vs.get(r["name"]) or {}).get("pooled", {}).get(pooled) if pooled else None
        table.add_row(*map(escape, [r["name"], _fmt(r["optimizer_steps"]), _fmt(tokens), _fmt(r["wall_s"], 0),
                                    _fmt(greedy), "ref" if r["name"] == ref else _fmt_diff(diff)]))
    _print(table, console)
    return table


def write_report(run_dir: Path, report: dict) -> None:
    from hyper_es.io import write_json_atomic

    write_json_atomic(Path(run_dir) / "report.json", report)
    (Path(run_dir) / "report.md").write_text(report_markdown(report))
