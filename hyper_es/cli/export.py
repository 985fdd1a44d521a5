"""`hyper-es export`: a run's model (merged HF folder or PEFT adapter) with its prompt."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from hyper_es.cli.app import _fail, _writable, command
from hyper_es.rundir import BEST_FILE, SEARCH_DIR


@command()
def export(
    run: Path,
    format: Annotated[str, typer.Option("--format", help="hf | mergekit | peft")],
    out: Annotated[Path, typer.Option(help="output folder (hf, peft) or YAML file (mergekit)")],
    genome: Annotated[Optional[Path], typer.Option(help="genome JSON with values (default: RUN/search/best.json)")] = None,
    weights: Annotated[Optional[str], typer.Option(help="one global weight per direction: name=w,name=w")] = None,
    row: Annotated[Optional[str], typer.Option(help="a row of the run's report instead (es, scaled, baseline@15, "
                                                    "hyper-es+prompt, ...): hf or peft")] = None,
    rank: Annotated[int, typer.Option(help="LoRA rank for --format peft")] = 16,
    max_error: Annotated[float, typer.Option(help="--format peft: refuse (writing nothing) when the adapter is further "
                                             "than this from the merged update, ‖ΔW − BA‖ / ‖ΔW‖ (exact: task "
                                             "arithmetic at rank ≥ the directions' summed ranks)")] = 0.01,
) -> None:
    """Export a merge of RUN's directions, or one of its report's rows: an HF folder, a mergekit YAML, or a PEFT
    LoRA adapter (SVD)."""
    from hyper_es import export as ex
    from hyper_es.directions import DirectionSet
    from hyper_es.merging import Genome, global_weights, recipe_genome
    from hyper_es.recipe import load_run_recipe
    from hyper_es.rows import prompt_file

    if format not in ("hf", "mergekit", "peft"):
        _fail(f"--format: expected hf, mergekit or peft, got '{format}'")
    _writable(out, folder=format != "mergekit")
    if row is not None:
        if genome or weights:
            _fail("--row: exports that row's weights; it takes no --genome or --weights")
        errors, prompt = ex.export_row(load_run_recipe(run), run, row, format, out, rank=rank,
                                       max_error=max_error)
        if errors:
            _svd_line(errors, rank)
        typer.echo(f"wrote {out}" + (f" and {prompt} (the co-evolved prompt the row was scored with)" if prompt else ""))
        return
    ds = DirectionSet.from_run(run)
    _, settings = recipe_genome(load_run_recipe(run), ds)
    if weights:
        try:
            pairs = {name: float(w) for name, w in (kv.split("=", 1) for kv in weights.split(","))}
        except ValueError:
            _fail(f"--weights: expected name=number pairs like dir-0=1,dir-1=0.5; got '{weights}'")
        if sorted(pairs) != sorted(ds.names):
            _fail(f"--weights: expected one weight for each of {', '.join(ds.names)}; got {', '.join(pairs)}")
        g, x = global_weights(ds, pairs)
    else:
        path = genome or run / SEARCH_DIR / BEST_FILE
        if genome is not None and not genome.is_file():
            _fail(f"--genome {genome}: no such file")
        if not path.is_file():
            _fail(f"{path}: no genome; run the search first, or pass --genome FILE or --weights a=1,b=0.5")
        g, x = Genome.from_json(path)
        if x is None:
            _fail(f"{path}: the genome JSON has no values")
        if tuple(g.directions) != tuple(ds.names):
            _fail(f"{path}: a genome over the directions {', '.join(g.directions)}; {run} has "
                  f"{', '.join(ds.names)}")
    if format == "hf":
        ex.export_hf(ds, g, x, settings, out)
    elif format == "mergekit":
        ex.export_mergekit(ds, g, x, settings, out)
    else:
        _svd_line(ex.export_peft(ds, g, x, settings, out, rank=rank, max_error=max_error), rank)
    typer.echo(f"wrote {out}")
    # the search's own genome: its co-evolved prompt with it
    prompt = ex.export_prompt(prompt_file(run, "hyper-es+prompt"), out) if genome is None and not weights else None
    if prompt:
        typer.echo(f"wrote {prompt} (the co-evolved prompt the search scored this genome with)")


def _svd_line(errors, rank: int) -> None:
    typer.echo(f"rank {rank}: the adapter is {errors.whole:.2%} off the merged update (per module: max "
               f"{max(errors.values(), default=0.0):.2%})")
