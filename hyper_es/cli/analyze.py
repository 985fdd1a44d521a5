"""`hyper-es analyze`: coverage, functional sparsity, scale fit of finished runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from hyper_es.cli.app import RecipeBackend, _backend, _fail, _writable, analyze_app, command


@command("coverage", group=analyze_app)
def coverage_cmd(
    runs: Annotated[list[Path], typer.Argument(help="run folders with evaluated rows (RUN/eval)")],
    out: Annotated[Path, typer.Option(help="folder for coverage.json and the PNG figures")],
) -> None:
    """Pass@k curves k = 1…n, per-problem solve-rate distributions, and problems only one row solves."""
    from hyper_es.analyze.coverage import analyze_coverage

    result = analyze_coverage(runs, _writable(out, folder=True))
    for task, t in result["tasks"].items():
        for name, r in t["rows"].items():
            typer.echo(f"{task:<12} {name:<24} pass@1 {r['pass_curve'][0]:.3f}  "
                       f"pass@{t['n']} {r['pass_curve'][-1]:.3f}  solved by this row only: {len(r['only_this_row'])}")
    typer.echo(f"figures: {', '.join(result['figures'])}")


@command("sparsity", group=analyze_app)
def sparsity_cmd(
    run: Annotated[Path, typer.Argument(help="a finished run folder (its recipe.yaml is used)")],
    out: Annotated[Path, typer.Option(help="folder for sparsity.json and sparsity.png")],
    rows: Annotated[str, typer.Option(help="rows whose update is cut: hyper-es, es, baseline, baseline@N, dir-k")
                    ] = "baseline,hyper-es",
    fractions: Annotated[str, typer.Option(help="fractions of ΔW entries kept (top by magnitude)")
                         ] = "0.5,0.2,0.1,0.05,0.01",
    backend: RecipeBackend = None,
    limit: Annotated[Optional[int], typer.Option(help="test problems per task (default: eval.limit, else all)")] = None,
) -> None:
    """Keep the top p of a row's update by magnitude; test accuracy kept at each p, and per-layer update norms."""
    from hyper_es.analyze.sparsity import analyze_sparsity
    from hyper_es.recipe import load_run_recipe

    _backend(backend)
    _writable(out, folder=True)
    try:
        ps = [float(p) for p in fractions.split(",") if p.strip()]
    except ValueError:
        ps = []
    if not ps or not all(0 < p <= 1 for p in ps):
        _fail(f"--fractions: expected comma-separated numbers in (0, 1] like 0.5,0.1; got '{fractions}'")
    recipe = load_run_recipe(run)
    result = analyze_sparsity(recipe, run, [r.strip() for r in rows.split(",") if r.strip()], ps, out,
                              backend=backend or recipe.eval.backend, limit=limit or recipe.eval.limit)
    for row, r in result["rows"].items():
        kept = "  ".join(f"{k} {v['mean']:.3f}" for k, v in r["accuracy"].items())
        typer.echo(f"{row:<12} {kept}")
        for k, d in r["paired"].items():
            typer.echo(f"{'':<12} {k} − full " + "{diff:+.3f} [{low:+.3f}, {high:+.3f}]".format(**d["vs_full"])
                       + "   − base " + "{diff:+.3f} [{low:+.3f}, {high:+.3f}]".format(**d["vs_base"]))
    typer.echo(f"figures: {', '.join(result['figures'])}")


@command("scale-fit", group=analyze_app)
def scale_fit_cmd(
    run: Annotated[Path, typer.Argument(help="a run folder with its adapters (its recipe.yaml is used)")],
    out: Annotated[Path, typer.Option(help="folder for scale_fit.json")],
    rows: Annotated[str, typer.Option(help="rows whose update is fitted: hyper-es, es, baseline@N, dir-k")] = "hyper-es",
    reference: Annotated[str, typer.Option(help="the row whose update is scaled")] = "baseline",
    block_size: Annotated[Optional[int], typer.Option(help="layers per block (default: merge.layer_group_size)",
                                                      min=1)] = None,
) -> None:
    """How much of a row's update one constant scale of the reference's explains, overall and per block of layers."""
    from hyper_es.analyze.scale_fit import analyze_scale_fit
    from hyper_es.recipe import load_run_recipe

    _writable(out, folder=True)
    result = analyze_scale_fit(load_run_recipe(run), run, [r.strip() for r in rows.split(",") if r.strip()],
                               reference, out, block_size)
    def num(x, spec=".3f"):  # None where the reference (or the row) is zero
        return "—" if x is None else format(x, spec)

    for row, r in result["rows"].items():
        typer.echo(f"{row} = s × {reference} + rest: s {num(r['scale'])}, cosine {num(r['cosine'])}, "
                   f"unexplained {num(r['unexplained'], '.1%')} of ‖ΔW‖²")
        for b, f in r["blocks"].items():
            typer.echo(f"  {b:<10} s {num(f['scale'])}  cosine {num(f['cosine'])}  ‖ΔW‖ {f['norm']:.4g}")
