"""Human-readable result tables (rich) for evaluation results."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from hyper_es.evaluate.runner import TaskResult


def _print(table: Table, console: Console | None) -> None:
    console = console or Console(width=None if Console().is_terminal else 140)
    console.print(table)


def directions_table(folders: Sequence[Path], console: Console | None = None) -> Table:
    """One row per finished gradient-stage job, from its manifest."""
    from hyper_es.directions.manifest import read_manifest

    table = Table(title="directions")
    for col in ("name", "steps", "lr", "seed", "shard", "completions", "first reward", "last reward", "s"):
        table.add_column(col, justify="left" if col == "name" else "right")
    for folder in folders:
        m = read_manifest(folder)
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
def _cost(run_dir: Path, names: list[str]) -> tuple[int, int, float]:
    """(optimizer steps, generated training tokens, wall seconds) summed over gradient-stage jobs."""
    from hyper_es.directions.manifest import read_manifest

    ms = [read_manifest(run_dir / "directions" / n) for n in names]
    return sum(m["optimizer_steps"] for m in ms), sum(m["tokens"] for m in ms), sum(m["wall_seconds"] for m in ms)


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


def run_report(recipe, run_dir: Path, rows: list[dict]) -> dict:
    """report.json: every evaluated row with its results and what it cost (steps, tokens, wall time)."""
    from hyper_es.io import read_json

    run_dir = Path(run_dir)
    dirs = [r["name"] for r in rows if r["kind"] == "direction"]
    search_dir = run_dir / "search"
    log = _read_log(search_dir / "generations.jsonl")
    result = (read_json(search_dir / "result.json", "delete it to score the search's rows again (re-run)")
              if (search_dir / "result.json").is_file() else {})
    search = {"generations": len(log), "evals": result.get("evals"), "seconds": result.get("search_seconds"),
              "tokens": sum(r.get("tokens", 0) for r in log), "rows": result.get("rows")}
    out = []
    for r in rows:
        steps, tokens, wall, search_tokens = r["steps"], None, None, 0
        if r["kind"] == "base":
            tokens, wall = 0, 0.0
        elif r["kind"] in ("direction", "baseline"):
            steps, tokens, wall = _cost(run_dir, [r["name"]])
        elif r["kind"] in ("uniform", "hyper-es"):
            steps, tokens, wall = _cost(run_dir, dirs)
            if r["kind"] == "hyper-es":
                search_tokens, wall = search["tokens"], wall + (search["seconds"] or 0.0)
        metrics = sorted({k for res in r["results"].values() for k in res if k == "greedy" or k.startswith("pass@")},
                         key=lambda k: (k != "greedy", int(k[5:]) if k.startswith("pass@") else 0))
        mean = {k: sum(res[k] for res in r["results"].values()) / len(r["results"]) for k in metrics
                if all(k in res for res in r["results"].values())}
        out.append({"name": r["name"], "kind": r["kind"], "optimizer_steps": steps, "train_tokens": tokens,
                    "search_tokens": search_tokens, "wall_s": wall, "results": r["results"], "mean": mean})
    e = recipe.eval
    return {"recipe": recipe.name, "model": recipe.model.name, "tasks": sorted(rows[0]["results"]) if rows else [],
            "eval": {"backend": e.backend, "k": e.k, "n": e.n or max(e.k), "temperature": e.temperature,
                     "limit": e.limit, "greedy": "temperature 0, one completion"},
            "rows": out, "search": search}


def _metric_columns(report: dict) -> list[tuple[str, str]]:
    cols = []
    for task in report["tasks"]:
        keys = {k for r in report["rows"] for k in r["results"].get(task, {})}
        cols += [(task, k) for k in ["greedy"] + [f"pass@{k}" for k in report["eval"]["k"]] if k in keys]
    return cols


def _fmt(v, digits=3) -> str:
    return "—" if v is None else f"{v:.{digits}f}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v)


def report_markdown(report: dict) -> str:
    cols = _metric_columns(report)
    e = report["eval"]
    head = ["model", "optimizer steps", "train tokens", "search tokens", "wall s", *[f"{t} {k}" for t, k in cols]]
    limit = f" (first {e['limit']} problems each)" if e["limit"] else ""
    lines = [f"# {report['recipe']}: {report['model']}", "",
             f"Held-out test sets{limit}. greedy: one "
             f"completion at temperature 0; pass@k: unbiased estimate from n={e['n']} samples at temperature "
             f"{e['temperature']:g}.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in report["rows"]:
        cells = [r["name"], _fmt(r["optimizer_steps"]), _fmt(r["train_tokens"]), _fmt(r["search_tokens"]),
                 _fmt(r["wall_s"], 0)] + [_fmt(r["results"].get(t, {}).get(k)) for t, k in cols]
        lines.append("| " + " | ".join(cells) + " |")
    s = report["search"]
    lines += ["", f"Search: {s['generations']} generations, {s['evals']} candidates, {_fmt(s['tokens'])} tokens, "
              f"{_fmt(s['seconds'], 0)} s."]
    return "\n".join(lines) + "\n"


def report_table(report: dict, console: Console | None = None) -> Table:
    cols = _metric_columns(report)
    table = Table(title=f"{report['recipe']}: held-out test sets")
    for c in ("model", "steps", "train tok", "search tok", "wall s", *[f"{t} {k}" for t, k in cols]):
        table.add_column(c, justify="left" if c == "model" else "right")
    if console is None and not Console().is_terminal:
        console = Console(width=60 + 16 * len(cols))  # logs and CI: wide enough that nothing is cut
    for r in report["rows"]:
        table.add_row(r["name"], _fmt(r["optimizer_steps"]), _fmt(r["train_tokens"]), _fmt(r["search_tokens"]),
                      _fmt(r["wall_s"], 0), *[_fmt(r["results"].get(t, {}).get(k)) for t, k in cols])
    _print(table, console)
    return table


def write_report(run_dir: Path, report: dict) -> None:
    from hyper_es.io import write_json_atomic

    write_json_atomic(Path(run_dir) / "report.json", report)
    (Path(run_dir) / "report.md").write_text(report_markdown(report))
