"""The base model's pass rate per train row, measured once with the engine for `gradient.vary: difficulty`
(RUN/directions/difficulty.json; directions/difficulty.py bins the rows by it)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from hyper_es.directions.difficulty import difficulty_path, difficulty_settings
from hyper_es.directions.train import training_tasks
from hyper_es.engine import make_generator, serve_kwargs
from hyper_es.evaluate.runner import evaluate_task
from hyper_es.io import write_json_atomic

logger = logging.getLogger(__name__)


def measure_difficulty(recipe, run_dir: str | Path, *, backend: str | None = None) -> Path:
    """Score `difficulty_samples` completions of the base on each task's first `difficulty_rows` train rows, at
    the gradient stage's temperature and completion length; a finished measurement is kept."""
    path = difficulty_path(Path(run_dir))
    if path.is_file():
        return path
    g, m = recipe.gradient, recipe.model
    gen, tok = make_generator(backend or recipe.eval.backend, m.name, dtype=recipe.eval.dtype, model_dtype=m.dtype,
                              batch_size=recipe.eval.batch_size, seed=g.seed, revision=m.revision,
                              trust_remote_code=m.trust_remote_code, serve=serve_kwargs(recipe))
    rates, tokens, t0 = {}, 0, time.perf_counter()
    try:
        for task in training_tasks(recipe):
            sampling = task.sampling(n=g.difficulty_samples, temperature=g.temperature, seed=g.seed,
                                     max_tokens=g.max_completion_length)
            result = evaluate_task(gen, tok, task, split="train", sampling=sampling, limit=g.difficulty_rows)
            rates[task.name] = {r["id"]: sum(s >= 1.0 for s in r["scores"]) / len(r["scores"])
                                for r in result.records}
            tokens += result.tokens
            logger.info("difficulty %s: mean base pass rate %.3f on %d train rows", task.name,
                        sum(rates[task.name].values()) / len(rates[task.name]), len(rates[task.name]))
    finally:
        gen.close()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, {"settings": difficulty_settings(recipe), "backend": gen.backend, "tokens": tokens,
                             "seconds": time.perf_counter() - t0, "pass_rate": rates})
    return path
