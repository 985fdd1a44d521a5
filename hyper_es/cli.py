"""`hyper-es` command line. User errors print one line per problem and exit 2, with no traceback."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from hyper_es.errors import HyperESError

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__, pretty_exceptions_enable=False)
logger = logging.getLogger("hyper_es")


def _fail(msg: str) -> None:
    typer.echo("\n".join(f"error: {line}" for line in msg.splitlines()), err=True)
    raise typer.Exit(2)


def _ints(text: str, opt: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        vals = ()
    if not vals or min(vals) < 1:
        _fail(f"{opt}: expected comma-separated positive integers like 1,8; got '{text}'")
    return vals


@app.callback()
def main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="debug logging")] = False) -> None:
    import signal

    from hyper_es.progress import setup_logging

    setup_logging(verbose)
    # SIGTERM unwinds like Ctrl-C, so engines are shut down (vLLM's EngineCore would otherwise outlive us) and
    # stages stop between atomic writes; a re-run resumes.
    signal.signal(signal.SIGTERM, _terminate)


def _terminate(signum, frame) -> None:
    raise SystemExit(128 + signum)


@app.command()
def check(recipe: Path) -> None:
    """Validate a recipe and print it resolved (all defaults filled in)."""
    from hyper_es.recipe import load_recipe

    try:
        typer.echo(load_recipe(recipe).to_yaml())
    except HyperESError as exc:
        _fail(str(exc))


@app.command()
def collect(
    recipe: Path,
    out: Annotated[Path, typer.Option(help="run directory (re-running on it resumes)")],
    baseline: Annotated[bool, typer.Option(help="also train the GRPO-LoRA baseline (K=1, full budget)")] = False,
    baseline_only: Annotated[bool, typer.Option(help="train only the baseline")] = False,
) -> None:
    """Gradient stage: K short GRPO-LoRA jobs → RUN/directions/<name>/ (adapter + manifest)."""
    from hyper_es.directions.collect import collect as run_collect
    from hyper_es.recipe import load_recipe

    try:
        rec = load_recipe(recipe)
        folders = run_collect(rec, out, baseline=baseline or baseline_only, directions=not baseline_only)
    except HyperESError as exc:
        _fail(str(exc))
    from hyper_es.directions import DirectionSet
    from hyper_es.directions.manifest import write_json_atomic
    from hyper_es.report import directions_table, geometry_table

    directions_table(folders)
    if not baseline_only:
        geom = DirectionSet.from_run(out).geometry()
        write_json_atomic(out / "geometry.json", geom)
        geometry_table(geom)


@app.command("run")
def run_cmd(
    recipe: Path,
    out: Annotated[Path, typer.Option(help="run directory (re-running on it resumes every stage)")],
    backend: Annotated[Optional[str], typer.Option(help="vllm | hf (default: the recipe's eval.backend)")] = None,
    quick: Annotated[bool, typer.Option(help="scale the recipe down for a first look (minutes on a CPU)")] = False,
) -> None:
    """Whole pipeline: directions + GRPO-LoRA baseline → search → final evaluation → RUN/report.json and report.md."""
    from hyper_es.pipeline import quick as quick_recipe
    from hyper_es.pipeline import run
    from hyper_es.recipe import load_recipe
    from hyper_es.report import report_table

    if backend not in (None, "vllm", "hf"):
        _fail(f"--backend: expected vllm or hf, got '{backend}'")
    try:
        rec = load_recipe(recipe)
        report = run(quick_recipe(rec) if quick else rec, out, backend=backend)
    except HyperESError as exc:
        _fail(str(exc))
    report_table(report)
    typer.echo(f"report: {out / 'report.md'}")


@app.command("search")
def search_cmd(
    recipe: Path,
    out: Annotated[Path, typer.Option(help="run directory with finished directions (re-running resumes)")],
    backend: Annotated[Optional[str], typer.Option(help="vllm | hf (default: the recipe's eval.backend)")] = None,
) -> None:
    """Search: CMA-ES over layer-wise merge coefficients, scored by a resident engine re-merged in place."""
    from hyper_es.recipe import load_recipe
    from hyper_es.search.run import search

    if backend not in (None, "vllm", "hf"):
        _fail(f"--backend: expected vllm or hf, got '{backend}'")
    try:
        result = search(load_recipe(recipe), out, backend=backend)
    except HyperESError as exc:
        _fail(str(exc))
    for name, row in result["rows"].items():
        test = "" if row["test"] is None else f"  test {row['test']:.3f}"
        typer.echo(f"{name:<10} val {row['val']:.3f}{test}")


@app.command()
def export(
    run: Path,
    format: Annotated[str, typer.Option("--format", help="hf | mergekit | peft")],
    out: Annotated[Path, typer.Option(help="output folder (hf, peft) or YAML file (mergekit)")],
    genome: Annotated[Optional[Path], typer.Option(help="genome JSON with values (default: RUN/search/best.json)")] = None,
    weights: Annotated[Optional[str], typer.Option(help="one global weight per direction: name=w,name=w")] = None,
    rank: Annotated[int, typer.Option(help="LoRA rank for --format peft")] = 16,
) -> None:
    """Export a merge of RUN's directions: an HF folder, a mergekit YAML, or a PEFT LoRA adapter (SVD)."""
    from hyper_es import export as ex
    from hyper_es.directions import DirectionSet
    from hyper_es.merging import Genome, MergeSettings, global_weights
    from hyper_es.recipe import load_recipe

    if format not in ("hf", "mergekit", "peft"):
        _fail(f"--format: expected hf, mergekit or peft, got '{format}'")
    try:
        ds = DirectionSet.from_run(run)
        settings = MergeSettings.from_config(load_recipe(run / "recipe.yaml").merge)
        if weights:
            pairs = dict(kv.split("=", 1) for kv in weights.split(","))
            if sorted(pairs) != sorted(ds.names):
                _fail(f"--weights: expected one weight for each of {', '.join(ds.names)}; got {', '.join(pairs)}")
            g, x = global_weights(ds, pairs)
        else:
            path = genome or run / "search" / "best.json"
            if not path.is_file():
                _fail(f"{path}: no genome; run the search first, or pass --genome FILE or --weights a=1,b=0.5")
            g, x = Genome.from_json(path)
            if x is None:
                _fail(f"{path}: the genome JSON has no values")
        if format == "hf":
            ex.export_hf(ds, g, x, settings, out)
        elif format == "mergekit":
            ex.export_mergekit(ds, g, x, settings, out)
        else:
            errors = ex.export_peft(ds, g, x, settings, out, rank=rank)
            typer.echo(f"rank {rank}: relative error per module: max {max(errors.values()):.4f}")
    except (HyperESError, ValueError) as exc:
        _fail(str(exc))
    typer.echo(f"wrote {out}")


@app.command("eval")
def eval_cmd(
    task: Annotated[list[str], typer.Option("--task", "-t", help="built-in task, or a task of --recipe (repeatable)")],
    model: Annotated[Optional[str], typer.Option(help="built-in name, local folder or hub id")] = None,
    adapter: Annotated[Optional[Path], typer.Option(help="PEFT LoRA adapter to merge into the model first")] = None,
    recipe: Annotated[Optional[Path], typer.Option(help="take model and tasks from this recipe")] = None,
    backend: Annotated[str, typer.Option(help="vllm | hf")] = "vllm",
    k: Annotated[str, typer.Option(help="pass@k values, e.g. 1,8")] = "1",
    n: Annotated[Optional[int], typer.Option(help="samples per problem (default: largest k)")] = None,
    temperature: Annotated[Optional[float], typer.Option(help="default: 0 (greedy) if n=1, else 1.0")] = None,
    top_p: float = 1.0,
    max_tokens: Annotated[Optional[int], typer.Option(help="default: the task's max_tokens")] = None,
    split: str = "test",
    limit: Annotated[Optional[int], typer.Option(help="first N problems only")] = None,
    dtype: Annotated[str, typer.Option(help="auto (the recipe's model.dtype; without --recipe: vLLM bf16, HF fp32) | float32 | bfloat16 | float16")] = "auto",
    seed: int = 0,
    threads: Annotated[Optional[int], typer.Option(help="torch threads in this process (default: 1 with vllm)")] = None,
    out: Annotated[Optional[Path], typer.Option(help="write the results JSON here")] = None,
) -> None:
    """Evaluate a model on tasks: Pass@1 (greedy by default) and Pass@k with sampling."""
    from hyper_es.engine import Sampling, make_generator
    from hyper_es.evaluate import evaluate_task
    from hyper_es.recipe import load_recipe
    from hyper_es.report import results_table
    from hyper_es.tasks import get_task

    ks = _ints(k, "--k")
    n = n or max(ks)
    temperature = (0.0 if n == 1 else 1.0) if temperature is None else temperature
    if backend not in ("vllm", "hf"):
        _fail(f"--backend: expected vllm or hf, got '{backend}'")
    try:
        rec = load_recipe(recipe) if recipe else None
        model = model or (rec.model.name if rec else None)
        if not model:
            _fail("--model is required (or --recipe with a model)")
        tasks = [get_task(t, rec) for t in task]
        samplings = [Sampling(n=n, temperature=temperature, top_p=top_p, seed=seed,
                              max_tokens=max_tokens or t.cfg.max_tokens, stop=tuple(t.cfg.stop)) for t in tasks]
        for t in tasks:
            t.rows(split)  # fail on data problems before starting an engine
    except (HyperESError, ValueError) as exc:
        _fail(str(exc))

    import torch

    torch.set_num_threads(threads or (1 if backend == "vllm" else (os.cpu_count() or 1)))
    kw = dict(dtype=dtype, seed=seed)
    if rec:
        kw.update(revision=rec.model.revision, trust_remote_code=rec.model.trust_remote_code,
                  max_model_len=rec.model.max_model_len, model_dtype=rec.model.dtype)
    try:
        if adapter:
            from hyper_es.models import with_adapter

            kw.pop("revision", None)
            model = str(with_adapter(model, adapter, revision=rec.model.revision if rec else None))
        gen, tokenizer = make_generator(backend, model, **kw)
    except (HyperESError, FileNotFoundError, ImportError) as exc:
        _fail(str(exc))
    try:
        results = [evaluate_task(gen, tokenizer, t, split=split, sampling=s, ks=ks, limit=limit)
                   for t, s in zip(tasks, samplings)]
    finally:
        gen.close()
    results_table(results, title=f"{model} ({backend}, {dtype})")
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        payload = {"model": model, "backend": backend, "dtype": dtype, "command": " ".join(["hyper-es", *sys.argv[1:]]),
                   "results": [{**r.summary(), "records": r.records} for r in results]}
        out.write_text(json.dumps(payload, indent=1))
        logger.info("wrote %s", out)


if __name__ == "__main__":
    app()
