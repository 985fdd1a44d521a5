"""The pipeline's commands: check, collect, run, es, search, eval."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from hyper_es.errors import HyperESError
from hyper_es.cli.app import RecipeBackend, _backend, _fail, _ints, _writable, command, logger
from hyper_es.rundir import GEOMETRY_FILE, REPORT_MD


@command()
def check(
    recipe: Path,
    resolve: Annotated[bool, typer.Option(help="also find the model and load the data (--no-resolve: schema and "
                                          "jobs only, e.g. a GPU recipe on a machine without its model)")] = True,
    run: Annotated[Optional[Path], typer.Option(help="a run folder with finished directions: also estimate how much "
                                                "of the merge the engine's dtype keeps (x0 × 0.25, 1, 4)")] = None,
    plan: Annotated[bool, typer.Option(help="print the GPU memory plan (each stage's peak and what makes it up) "
                                       "instead; a recipe that does not fit is refused (exit 2)")] = False,
    device_memory: Annotated[str, typer.Option(help="--plan: the GPU's memory, e.g. 80GiB, 40GiB")] = "80GiB",
    prompt_tokens: Annotated[int, typer.Option(help="--plan: the longest prompt a GRPO micro-batch holds")] = 512,
    print_recipe: Annotated[bool, typer.Option("--print", help="also print the recipe resolved (every default "
                                               "filled in), as YAML")] = False,
) -> None:
    """Validate a recipe (schema, model, tasks' data, gradient jobs or given directions) and summarise what it will
    run: model, tasks and their rows, directions, genome size, and at most how many tokens each stage generates."""
    from hyper_es import models
    from hyper_es.directions.jobs import plan_baseline, plan_directions
    from hyper_es.recipe import load_recipe
    from hyper_es.tasks import Task

    rec = load_recipe(recipe)
    plan_directions(rec), plan_baseline(rec)
    if plan:
        from hyper_es.memory import parse_size, recipe_plan
        from hyper_es.memory.table import plan_text

        p = recipe_plan(rec, parse_size(device_memory), resolve=resolve, prompt_tokens=prompt_tokens)
        typer.echo(plan_text(p))
        refusal = p.refusal()
        if refusal:
            _fail(refusal)
        return
    if run is not None and not resolve:
        _fail("--run needs the model and the directions: drop --no-resolve")
    if not resolve:
        typer.echo(rec.to_yaml() if print_recipe else f"recipe {rec.name}: the schema and the gradient jobs are valid "
                   f"(--print shows it resolved; without --no-resolve the model and data are checked too)")
        return
    from hyper_es.cli.summary import summary_lines

    models.resolve(rec.model.name, revision=rec.model.revision)
    stats = {cfg.name: Task(cfg, rec.base_dir).split_stats() for cfg in rec.tasks}  # loads every split
    for line in summary_lines(rec, stats):
        typer.echo(line)
    if print_recipe:
        typer.echo(rec.to_yaml())
    for name, st in stats.items():
        splits = ", ".join(f"{s} {v['distinct']:,} distinct of {v['rows']:,}" for s, v in st["splits"].items())
        shared = ", ".join(f"{k} {v}" for k, v in st["overlap"].items())
        typer.echo(f"# {name} (partition {st['partition']}): {splits}" + (f"; shared questions: {shared}" if shared else ""))
    if run is not None:
        _check_fidelity(rec, run)


def _check_fidelity(rec, run: Path, scales=(0.25, 1.0, 4.0)) -> None:
    """Table of the fidelity (engine/fidelity.py) of the recipe's merge at x0 × scale, in the engine's dtype (and
    in bf16 for comparison when that is fp32), computed on the CPU without an engine: installed in place, and (a
    linear merge of LoRA directions) served as a LoRA adapter; one line of verdict, with the path the search takes."""
    from hyper_es.directions import DirectionSet
    from hyper_es.engine import engine_dtype, merge_weights, serving
    from hyper_es.engine.fidelity import WARN_ABOVE, adapter_fidelity, merge_fidelity
    from hyper_es.merging import MergePlan, recipe_genome
    from hyper_es.merging.low_rank import LowRankPlan, linear_reason

    ds = DirectionSet.from_run(run)
    genome, settings = recipe_genome(rec, ds)
    dtype = engine_dtype(rec.eval.backend, rec.eval.dtype, rec.model.dtype)
    # the table says how lossy; the engine's start refuses
    served_dtype, path, why = serving(rec, rec.eval.backend, merge_weights(rec, ds, genome, settings), lossy=True)
    dtypes = list(dict.fromkeys([dtype, served_dtype] + (["bfloat16"] if dtype == "float32" else [])))
    plan = MergePlan(ds, genome, settings, prepare=False)
    low = None if linear_reason(plan) else LowRankPlan(plan)
    x0 = genome.initial(rec.search.x0, rec.merge.density)
    cols = [("inplace", d) for d in dtypes] + ([("lora", d) for d in dtypes] if low else [])
    rows = []
    for c in scales:
        x = genome.scaled(x0, c)
        fid = {("inplace", d): v for d, v in merge_fidelity(plan, x, dtypes, rows=None).items()}  # every entry
        if low:
            fid |= {("lora", d): v for d, v in adapter_fidelity(low, x, dtypes, rows=None).items()}
        rows.append((c, fid))
    typer.echo(f"fidelity ‖installed − intended‖ / ‖intended‖ of the merge at x0 × scale ({len(ds)} "
               f"direction{'s' * (len(ds) != 1)}, {rec.eval.backend} engine in {dtype}):")
    typer.echo("scale".rjust(8) + "".join(f"{p}:{d}".rjust(18) for p, d in cols))
    for c, fid in rows:
        typer.echo(f"{c:8.2f}" + "".join(f"{fid[col]:18.3f}" for col in cols))
    at_x0 = dict(rows)[1.0][(path, served_dtype)]
    served = "as LoRA adapters" if path == "lora" else "in place"
    advice = ""
    if at_x0 > WARN_ABOVE:
        advice = "; set eval.dtype: float32" + (" or serve.candidates: lora" if low else "")
        if path == "inplace" and served_dtype not in ("float32", "float64") and not rec.serve.lossy_inplace:
            advice += " (the engine refuses it unless serve.lossy_inplace: true)"
    typer.echo(f"verdict: serve.candidates {rec.serve.candidates}: served {served} in {served_dtype} ({why}); at x0 "
               f"the served update is off by {at_x0:.1%}{advice}")


@command()
def collect(
    recipe: Path,
    out: Annotated[Path, typer.Option(help="run directory (re-running on it resumes)")],
    baseline: Annotated[bool, typer.Option(help="also train the GRPO-LoRA baseline (K=1, full budget)")] = False,
    baseline_only: Annotated[bool, typer.Option(help="train only the baseline")] = False,
) -> None:
    """Gradient stage: K short GRPO-LoRA jobs → RUN/directions/<name>/ (adapter + manifest)."""
    from hyper_es.directions.collect import collect as run_collect
    from hyper_es.evaluate.pass_rates import measure_difficulty
    from hyper_es.recipe import load_recipe

    _writable(out, folder=True)
    folders = run_collect(load_recipe(recipe), out, baseline=baseline or baseline_only, directions=not baseline_only,
                          measure=measure_difficulty)
    from hyper_es.directions import DirectionSet
    from hyper_es.io import write_json_atomic
    from hyper_es.report import directions_table, geometry_table

    directions_table(folders)
    if not baseline_only:
        geom = DirectionSet.from_run(out).geometry()
        write_json_atomic(out / GEOMETRY_FILE, geom)
        geometry_table(geom)


@command("run")
def run_cmd(
    recipe: Path,
    out: Annotated[Path, typer.Option(help="run directory (re-running on it resumes every stage)")],
    backend: RecipeBackend = None,
    quick: Annotated[bool, typer.Option(help="scale the recipe down for a first look (minutes on a CPU)")] = False,
) -> None:
    """Whole pipeline: directions + GRPO-LoRA baseline → search → final evaluation → RUN/report.json and report.md."""
    from hyper_es.pipeline import quick as quick_recipe
    from hyper_es.pipeline import run
    from hyper_es.recipe import load_recipe
    from hyper_es.report import report_table

    _backend(backend)
    _writable(out, folder=True)
    rec = load_recipe(recipe)
    report = run(quick_recipe(rec) if quick else rec, out, backend=backend)
    report_table(report)
    typer.echo(f"report: {out / REPORT_MD}")


@command("es")
def es_cmd(
    recipe: Path,
    out: Annotated[Path, typer.Option(help="run directory (re-running resumes by replaying RUN/es/history.jsonl)")],
    backend: RecipeBackend = None,
) -> None:
    """Full-parameter ES (the recipe's `es` section), fitness and guard as the search's."""
    from hyper_es.search.es_run import run_es
    from hyper_es.recipe import load_recipe

    _backend(backend)
    _writable(out, folder=True)
    result = run_es(load_recipe(recipe), out, backend=backend)
    g, kept = result["guard"], "ES" if result["kept_iterations"] else "the start"
    typer.echo(f"ES: {result['iterations']} iterations; validation start {g['x0_val']:.3f}, ES {g['best_val']:.3f} "
               f"({g['better_rows']} rows better, {g['worse_rows']} worse): kept {kept}")


@command("search")
def search_cmd(
    recipe: Path,
    out: Annotated[Path, typer.Option(help="run directory with finished directions (re-running resumes)")],
    backend: RecipeBackend = None,
) -> None:
    """Search: CMA-ES over layer-wise merge coefficients, scored by a resident engine re-merged in place."""
    from hyper_es.recipe import load_recipe
    from hyper_es.search.run import search

    _backend(backend)
    _writable(out, folder=True)
    result = search(load_recipe(recipe), out, backend=backend)
    for name, row in result["rows"].items():
        test = "" if row["test"] is None else f"  test {row['test']:.3f}"
        typer.echo(f"{name:<10} val {row['val']:.3f}{test}")


def _with_adapter(backend: str, model: str, adapter: Path, kw: dict) -> str:
    """`eval --adapter`: served as a LoRA beside 16-bit weights (checked against the base before an engine starts;
    merged into them, the update would round away), else merged into the weights (fp32 exact, or HF). Returns the
    model to serve; `kw` gets the adapter when it is served as a LoRA."""
    from hyper_es.engine import adapter_as_lora, engine_dtype
    from hyper_es.models import check_adapter, with_adapter

    if adapter_as_lora(backend, engine_dtype(backend, kw["dtype"], kw.get("model_dtype"))):
        from hyper_es.directions import DirectionSet

        check_adapter(adapter, model)  # (with_adapter checks it on the other path)
        try:  # its shapes against the base
            DirectionSet.from_adapters(model, [adapter])
        except HyperESError as exc:
            _fail(f"--adapter {adapter}: not an adapter of {model} ({exc})")
        kw["adapter"] = adapter
        return model
    return str(with_adapter(model, adapter, revision=kw.pop("revision", None)))


@command("eval")
def eval_cmd(
    task: Annotated[list[str], typer.Option("--task", "-t", help="built-in task, or a task of --recipe (repeatable)")],
    model: Annotated[Optional[str], typer.Option(help="built-in name, local folder or hub id")] = None,
    adapter: Annotated[Optional[Path], typer.Option(help="PEFT LoRA adapter: served as a LoRA by a 16-bit vLLM engine, "
                                                    "merged into the weights otherwise")] = None,
    recipe: Annotated[Optional[Path], typer.Option(help="take model and tasks from this recipe")] = None,
    backend: Annotated[str, typer.Option(help="vllm | hf")] = "vllm",
    k: Annotated[str, typer.Option(help="pass@k values, e.g. 1,8")] = "1",
    n: Annotated[Optional[int], typer.Option(help="samples per problem (default: largest k)")] = None,
    temperature: Annotated[Optional[float], typer.Option(help="default: 0 (greedy) if n=1, else 1.0")] = None,
    top_p: float = 1.0,
    max_tokens: Annotated[Optional[int], typer.Option(help="default: the task's max_tokens")] = None,
    split: str = "test",
    limit: Annotated[Optional[int], typer.Option(help="first N problems only")] = None,
    dtype: Annotated[str, typer.Option(help="auto (the recipe's eval.dtype, else its model.dtype; without --recipe: vLLM bf16, HF fp32) | float32 | bfloat16 | float16")] = "auto",
    seed: int = 0,
    threads: Annotated[Optional[int], typer.Option(help="torch threads in this process (default: 1 with vllm)")] = None,
    out: Annotated[Optional[Path], typer.Option(help="write the results JSON here")] = None,
) -> None:
    """Evaluate a model on tasks: Pass@1 (greedy by default) and Pass@k with sampling."""
    from hyper_es.engine import make_generator
    from hyper_es.evaluate import EvalJob, evaluate_tasks
    from hyper_es.recipe import load_recipe
    from hyper_es.report import results_table
    from hyper_es.tasks import get_task

    ks = _ints(k, "--k")
    n = n or max(ks)
    temperature = (0.0 if n == 1 else 1.0) if temperature is None else temperature
    _backend(backend, required=True)
    if out is not None:
        _writable(out, folder=False)
    rec = load_recipe(recipe) if recipe else None
    model = model or (rec.model.name if rec else None)
    if not model:
        _fail("--model is required (or --recipe with a model)")
    tasks = [get_task(t, rec) for t in task]
    samplings = [t.sampling(n=n, temperature=temperature, top_p=top_p, seed=seed, max_tokens=max_tokens)
                 for t in tasks]
    for t in tasks:
        t.rows(split)  # fail on data problems before starting an engine
    if max(ks) > n:
        _fail(f"--k {max(ks)} needs --n >= {max(ks)} samples per problem, got --n {n}")

    import torch

    torch.set_num_threads(threads or (1 if backend == "vllm" else (os.cpu_count() or 1)))
    kw = dict(dtype=rec.eval.dtype if rec and dtype == "auto" else dtype, seed=seed)
    if rec:
        from hyper_es.engine import serve_kwargs

        kw.update(revision=rec.model.revision, trust_remote_code=rec.model.trust_remote_code,
                  model_dtype=rec.model.dtype, serve=serve_kwargs(rec))
    if adapter:
        model = _with_adapter(backend, model, adapter, kw)
    gen, tokenizer = make_generator(backend, model, **kw)
    model = f"{model}+{adapter}" if kw.get("adapter") else model
    try:
        results = evaluate_tasks(gen, tokenizer, [EvalJob(t, split, s, ks, limit) for t, s in zip(tasks, samplings)])
    finally:
        gen.close()
    results_table(results, title=f"{model} ({backend}, {dtype})")
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        payload = {"model": model, "backend": backend, "dtype": dtype, "command": " ".join(["hyper-es", *sys.argv[1:]]),
                   "results": [{**r.summary(), "records": r.records} for r in results]}
        out.write_text(json.dumps(payload, indent=1))
        logger.info("wrote %s", out)
