"""`hyper-es compare` (Hyper-ES against the strongest simple controls, over seeds) and `hyper-es report` (its
summary rendered again from what is on disk)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from hyper_es.cli.app import _ints, _writable, command


@command("compare")
def compare_cmd(
    recipe: Path,
    out: Annotated[Path, typer.Option(help="the comparison's folder ROOT (re-running on it resumes every stage)")],
    seeds: Annotated[str, typer.Option(help="the seeds, comma-separated (each re-seeds training and search)")] = "0,1,2",
    figure: Annotated[bool, typer.Option(help="also draw ROOT/accuracy_cost.png")] = True,
    arms: Annotated[Optional[str], typer.Option(help="only these arms after the grid, comma-separated (main, a "
                                                "variant, equal, further); the others are summarized from disk")] = None,
) -> None:
    """Per seed: the baseline's lr grid until its best is interior, the main run at that lr, the recipe's variants
    and the grpo-equal-compute control (its `compare:` section); then every row's accuracy and cost (the grid's
    included) and each pair's paired 95% CI per seed and pooled, with the seed-level range. Writes
    ROOT/summary.json, summary.md and accuracy_cost.png; `hyper-es report ROOT` renders them again."""
    from hyper_es.compare.run import compare
    from hyper_es.recipe import load_recipe

    _writable(out, folder=True)
    rec = load_recipe(recipe)
    only = [a.strip() for a in arms.split(",") if a.strip()] if arms is not None else None
    typer.echo(compare(rec, list(dict.fromkeys(_ints(seeds, "--seeds", minimum=0))), out, figure=figure,
                       arms=only)[1], nl=False)


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
