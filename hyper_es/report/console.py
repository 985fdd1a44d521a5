"""The console tables (rich): directions, evaluation results, geometry, and a run report's one-screen summary."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from hyper_es.evaluate.runner import TaskResult
from hyper_es.report.markdown import _fmt, fmt_diff


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
                                    _fmt(greedy), "ref" if r["name"] == ref else fmt_diff(diff)]))
    _print(table, console)
    return table
