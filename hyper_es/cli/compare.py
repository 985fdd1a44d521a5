"""`hyper-es report`: a comparison's summary rendered again from what is on disk."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from hyper_es.cli.app import command


@command("report")
def report_cmd(
    root: Path,
    seeds: Annotated[Optional[list[int]], typer.Option("--seed", help="a seed to summarize (repeatable; default: "
                                                       "every ROOT/seed<N>/)")] = None,
    figure: Annotated[bool, typer.Option(help="also draw ROOT/accuracy_cost.png")] = True,
) -> None:
    """Summarize a comparison again from ROOT/compare.json and its run folders (ROOT/seed<N>/<arm>/): every row's
    accuracy and cost, each pair's paired 95% CI per seed and pooled with the seed-level range, and the goal;
    writes ROOT/summary.json, summary.md and accuracy_cost.png."""
    from hyper_es.compare import render

    typer.echo(render(root, seeds, figure=figure)[1], nl=False)
