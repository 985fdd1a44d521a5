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
