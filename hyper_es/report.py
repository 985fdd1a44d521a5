"""Human-readable result tables (rich) for evaluation results."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from hyper_es.evaluate.runner import TaskResult


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
    console = console or Console(width=None if Console().is_terminal else 140)
    console.print(table)
    return table
