"""`hyper-es check`'s summary: what a recipe will run and, at most, how many tokens it will generate."""

from __future__ import annotations

from hyper_es.recipe import Recipe


def genome_size(rec: Recipe) -> tuple[int, list[str]]:
    """(genes, direction names) of the recipe's search: its given directions read, trained ones planned from the
    LoRA targets on the base's tensors."""
    from hyper_es import models
    from hyper_es.directions.imported import given_set
    from hyper_es.directions.jobs import plan_directions
    from hyper_es.directions.sources import Dense, Direction
    from hyper_es.directions.set import DirectionSet
    from hyper_es.merging import recipe_genome

    if rec.directions is not None:
        ds = given_set(rec)
    else:
        import torch
        from hyper_es.directions.sources import tensor_shapes

        shapes = tensor_shapes(models.resolve(rec.model.name, revision=rec.model.revision))
        dirs = []
        for job in plan_directions(rec):
            targets = job.lora.targets
            parts = {t: Dense(torch.empty(0)) for t in shapes if any(t.endswith(f".{m}.weight") for m in targets)}
            dirs.append(Direction(job.name, parts))
        ds = DirectionSet(rec.model.name, dirs, validate=False)
    return recipe_genome(rec, ds)[0].size, ds.names


def token_bounds(rec: Recipe, genes: int, k: int, test_rows: dict[str, int]) -> dict[str, int]:
    """Generated tokens at most (every completion at its cap) per stage: the GRPO jobs, the search (scan,
    generations, validation re-scores, guard and its rows) and the final evaluation (greedy rows, Pass@k rows)."""
    from hyper_es.directions.jobs import plan_baseline, plan_directions
    from hyper_es.search.run import cma_popsize

    g, s, f, e = rec.gradient, rec.search, rec.fitness, rec.eval
    jobs = ([] if rec.directions else plan_directions(rec)) + (
        [plan_baseline(rec)] if rec.directions is None or rec.directions.baseline else [])
    per_step = g.batch_size * g.accumulation_steps * rec.completion_cap()
    searched = [rec.task(n) for n in rec.searched_task_names()]
    popsize = s.popsize or cma_popsize(genes)
    fit = sum(f.minibatch * f.samples * t.generated_cap for t in searched)
    val = sum(f.val_size * t.generated_cap for t in searched)
    search = (len(s.scale_scan or []) + s.max_generations * popsize) * fit + s.max_generations * f.rescore_top * val
    if s.max_tokens:  # the budget ends the generations once reached (after the one that reaches it)
        search = min(search, s.max_tokens + popsize * fit + f.rescore_top * val)
    search += 6 * val  # the guard and the rows' validation
    rows = 1 + k + 1 + 2 + (1 if jobs and jobs[-1].baseline else 0)  # base, directions, uniform, hyper-es + start
    tests = [t for t in rec.tasks if t.test is not None]
    limit = lambda t: min(test_rows.get(t.name, 0), e.limit or 10**9)  # noqa: E731
    greedy = rows * sum(limit(t) * t.generated_cap for t in tests)
    sampled = 3 * sum(min(limit(t), e.pass_k_limit or 10**9) * (e.n or max(e.k)) * t.generated_cap for t in tests)
    return {"gradient": sum(j.steps for j in jobs) * per_step, "search": search, "final evaluation": greedy + sampled}


def summary_lines(rec: Recipe, stats: dict) -> list[str]:
    tasks = "; ".join(f"{n} (" + ", ".join(f"{sp} {v['rows']:,}" for sp, v in st["splits"].items()) + ")"
                      for n, st in stats.items())
    head = [f"recipe {rec.name}: model {rec.model.name} ({rec.model.dtype}), {rec.eval.backend} engine",
            f"tasks: {tasks}"]
    if rec.method == "es":
        es = rec.es
        return head + [f"method es: full-parameter ES ({es.scope}) from the {es.start}, population {es.population}, "
                       f"{es.iterations} iterations" + (", then GRPO-LoRA" if es.then == "grpo" else "")]
    genes, names = genome_size(rec)
    test_rows = {n: st["splits"].get("test", {}).get("rows", 0) for n, st in stats.items()}
    tokens = token_bounds(rec, genes, len(names), test_rows)
    if rec.directions:
        src = f"{len(names)} given ({', '.join(names)})"
    elif rec.gradient.directions_from == "snapshots":
        src = f"{len(names)} increments of the GRPO-LoRA baseline's run, {rec.gradient.steps} steps each"
    else:
        src = f"{len(names)} GRPO-LoRA jobs of {rec.gradient.steps} steps"
    return head + [f"directions: {src}; merge {rec.merge.method}; genome {genes} genes",
                   "generated tokens at most: " + ", ".join(f"{k} {v:,}" for k, v in tokens.items())
                   + f" (total {sum(tokens.values()):,})"]
