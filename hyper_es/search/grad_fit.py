"""The gradient-fitted control (issue 44, recipe section `gradfit:`): the search's genome fitted by gradient instead
of CMA-ES, the answer to whether the search is the right optimiser for its subspace.

The touched weights become torch parametrizations W = W0 + merge(ΔW_1..K; x), merged as the search merges
(MergePlan.mix), with the genome vector x as the only trained parameter. TRL's GRPOTrainer trains x with the
gradient stage's batch, decoding, loss and rewards, on the search's fitness rows, from the search's start (its scale
scan's x0), until it has generated as many tokens as the search stage spent (scan, fitness, validation re-scores),
or spent its wall seconds (`gradfit.budget: seconds`), or `gradfit.max_tokens`. AdaMerging fits layer-wise
coefficients by entropy on unlabelled inputs; here the objective is the search's own reward. After each step x is put back inside the genome's bounds. The last x is
RUN/gradfit/best.json, and the `grad-fit` row merges it as the search merges. A killed fit starts again: it is a
short control, and its folder is written whole."""

from __future__ import annotations

import gc
import logging
import shutil
import time
from pathlib import Path

import numpy as np

from hyper_es.cost import Cost, stage_cost
from hyper_es.errors import DataError
from hyper_es.io import read_json, write_json_atomic
from hyper_es.recipe import Recipe
from hyper_es.rundir import BEST_FILE, GRADFIT_DIR, RESULT_FILE, SEARCH_DIR

logger = logging.getLogger(__name__)
JOB = "grad-fit"


def budget(recipe: Recipe, search: dict | None, path: Path) -> tuple[int | None, float | None]:
    """(generated tokens, wall seconds) the fit may spend: `gradfit.max_tokens`, else what the search stage spent
    of `gradfit.budget` (its tokens: scan, fitness and re-scores; or its seconds)."""
    g = recipe.gradfit
    if g.max_tokens:
        return g.max_tokens, None
    total = ((search or {}).get("cost") or {}).get("total")
    if not total:
        raise DataError(f"{path}: no finished search with a cost record to match its {g.budget}; finish the search "
                        f"or set gradfit.max_tokens")
    if g.budget == "seconds":
        return None, float(total["seconds"])
    return int(total["search_tokens"] + total["select_tokens"]), None


def fit_rows(recipe: Recipe) -> tuple[list, list[dict]]:
    """(the searched tasks, the GRPO rows): the search's fitness rows, its fixed draw or its whole pool."""
    from hyper_es.directions.train import prompt_rows
    from hyper_es.fitness import fitness_splits
    from hyper_es.fitness.rows import fitness_rows

    tasks, pool, _ = fitness_splits(recipe)
    if recipe.fitness.fitness_set == "fixed":
        pool = fitness_rows(pool, recipe.fitness, 0)
    return tasks, [row for t in tasks for row in prompt_rows(t, pool[t.name])]


def merged_parameters(model, plan, x0: np.ndarray):
    """Turn every weight the directions touch into W0 + merge(ΔW; x) with x (a float32 Parameter, returned) the
    model's only trainable parameter; `generate` merges once per call (parametrize.cached)."""
    import torch
    from torch.nn.utils import parametrize

    class Merged(torch.nn.Module):
        def __init__(self, tensor: str, x: torch.nn.Parameter):
            super().__init__()
            self.x = x  # the one Parameter, shared by every parametrization (named_parameters lists it once)
            self.register_buffer("deltas", plan.stacked(tensor), persistent=False)
            self.register_buffer("idx", torch.tensor(plan.key_idx[tensor]), persistent=False)

        def forward(self, w):
            return w + plan.mix(self.deltas, self.x[self.idx]).to(w.dtype)

    for p in model.parameters():
        p.requires_grad_(False)
    x = torch.nn.Parameter(torch.tensor(x0[: len(plan.genome.keys)], dtype=torch.float32))
    modules = dict(model.named_modules())
    for tensor in plan.tensors:
        owner, _, attr = tensor.rpartition(".")
        if owner not in modules or not hasattr(modules[owner], attr):
            raise DataError(f"the directions change '{tensor}', which the model has no parameter for")
        parametrize.register_parametrization(modules[owner], attr, Merged(tensor, x), unsafe=True)
    generate = model.generate

    def cached_generate(*args, **kwargs):
        with parametrize.cached():
            return generate(*args, **kwargs)

    model.generate = cached_generate
    return x


def Bounded(x, lower, upper, tokens: int | None, seconds: float | None, per_step: int):  # noqa: N802 - a factory
    """Clamp x into the genome's bounds after each optimizer step; stop once the generated tokens reach `tokens`
    or the training's wall time `seconds`."""
    import torch
    from transformers import TrainerCallback

    from hyper_es.directions.train import generated_curve

    lo, hi = torch.tensor(lower, dtype=torch.float32), torch.tensor(upper, dtype=torch.float32)
    t0 = time.perf_counter()

    class _Bounded(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            with torch.no_grad():
                x.copy_(torch.minimum(torch.maximum(x, lo), hi))
            if seconds is not None and time.perf_counter() - t0 >= seconds:
                control.should_training_stop = True

        def on_log(self, args, state, control, logs=None, **kwargs):
            curve = generated_curve(state.log_history, per_step)
            if tokens is not None and curve and curve[-1][1] >= tokens:
                control.should_training_stop = True

    return _Bounded()


def fit(recipe: Recipe, run_dir: str | Path) -> dict:
    """Fit the genome (or read a finished fit): RUN/gradfit/best.json and result.json; returns the result."""
    import torch

    from hyper_es import models
    from hyper_es.directions import DirectionSet
    from hyper_es.directions.jobs import JobSpec
    from hyper_es.directions.train import generated_curve, make_trainer
    from hyper_es.merging import MergePlan, recipe_genome
    from hyper_es.rows import start_genome

    run_dir = Path(run_dir)
    out = run_dir / GRADFIT_DIR
    if (out / RESULT_FILE).is_file():
        return read_json(out / RESULT_FILE, "delete the folder to fit again")
    path = run_dir / SEARCH_DIR / RESULT_FILE
    search = read_json(path, "delete it to finish the search again (re-run)") if path.is_file() else None
    ds = DirectionSet.from_run(run_dir)
    genome, settings = recipe_genome(recipe, ds)
    start = start_genome(run_dir)  # the search's start: its scale scan's x0, else the recipe's x0
    x0 = start[1] if start else genome.initial(recipe.search.x0, recipe.merge.density)
    tokens, seconds = budget(recipe, search, path)
    tasks, rows = fit_rows(recipe)
    work = out.with_name(f".work-{GRADFIT_DIR}")
    shutil.rmtree(work, ignore_errors=True)
    torch.set_num_threads(recipe.threads)
    model, tok = models.load(recipe.model.name, dtype=recipe.model.dtype, revision=recipe.model.revision,
                             trust_remote_code=recipe.model.trust_remote_code)
    x = merged_parameters(model, MergePlan(ds, genome, settings, prepare=True), x0)
    g = recipe.gradient
    job = JobSpec(JOB, recipe.fitness.seed, recipe.gradfit.learning_rate, recipe.gradfit.max_steps, None, 1, g.lora)
    quiet = recipe.model_copy(update={"gradient": g.model_copy(update={"checkpoint_every": 0, "use_vllm": False})})
    trainer = make_trainer(quiet, job, work / "trainer", model, tok, rows, tasks)
    per_step = g.batch_size * g.accumulation_steps
    trainer.add_callback(Bounded(x, *genome.lower_upper(), tokens, seconds, per_step))
    logger.info("grad-fit: %d coefficients from the search's start on %d rows, lr %.2g, until %s",
                x.numel(), len(rows), job.learning_rate,
                f"{tokens} generated tokens" if tokens is not None else f"{seconds:.0f} s")
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    history, steps = trainer.state.log_history, trainer.state.global_step
    curve = generated_curve(history, per_step)
    answer = x.detach().double().numpy()
    del trainer, model, x
    gc.collect()
    spent = curve[-1][1] if curve else 0
    result = {"x0": x0.tolist(), "x": answer.tolist(), "steps": steps, "budget": tokens, "budget_seconds": seconds,
              "learning_rate": job.learning_rate, "rows": len(rows), "token_curve": curve,
              "reward_curve": [[h["step"], h["reward"]] for h in history if "reward" in h], "seconds": wall,
              "cost": stage_cost({"fit": Cost(steps=steps, train_tokens=spent, seconds=wall)})}
    work.mkdir(parents=True, exist_ok=True)
    (work / BEST_FILE).write_text(genome.to_json(answer))
    write_json_atomic(work / RESULT_FILE, result)
    shutil.rmtree(work / "trainer", ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    work.rename(out)
    logger.info("grad-fit: %d steps, %d generated tokens, %.0f s -> %s", steps, spent, wall, out)
    return result
