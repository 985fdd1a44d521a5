"""The GPU memory plan: each stage's peak on one card, worked out from the model's config and the recipe, before
anything starts. Every stage runs in a process of its own (executor.isolate), so stages never add up.

- gradient job: CUDA context, the weights, the LoRA with its gradients and Adam moments (fp32), activations with
  gradient checkpointing (one hidden state per layer, one layer's working set), the logits over the vocabulary of a
  micro-batch, and TRL's colocated vLLM (its `gpu_memory_utilization` share of the card).
- search engine and final-evaluation engine: vLLM's share of the card (weights, LoRA slots, activation profile,
  CUDA graphs, KV cache) plus what the worker extension allocates beside it (in place: the fp32 masters and the
  prepared deltas; LoRA candidates: the stacked factors only).
Numbers are estimates from shapes (formulas below), not measurements: see docs/gpu.md for what ran where.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hyper_es.errors import HyperESError
from hyper_es.memory.shapes import GIB, PROJECTIONS, ModelShape

CUDA_CONTEXT = int(0.75 * GIB)  # CUDA context, cuBLAS workspace and allocator slack of one process
HEADROOM = GIB  # kept free on the card beside a stage's peak (fragmentation, other processes)
VLLM_MAX_UTIL = 0.92  # vLLM's default share, the most the plan gives an engine
VLLM_BATCHED_TOKENS = 8192  # vLLM's default max_num_batched_tokens (the activation profile's batch)
VLLM_MAX_SEQS = 256  # vLLM's default max_num_seqs (the sampler's profile batch)
CUDA_GRAPHS = GIB // 2  # graphs captured for the decode batch sizes (none with enforce_eager)
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's allowed max_lora_rank values
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass
class Stage:
    name: str
    parts: dict[str, int]  # what makes up the peak, bytes
    field: str  # the recipe field to change when it does not fit
    notes: list[str] = field(default_factory=list)
    settings: dict[str, float] = field(default_factory=dict)  # what the plan sets (e.g. gpu_memory_utilization)

    @property
    def peak(self) -> int:
        return sum(self.parts.values())


@dataclass
class Plan:
    recipe: str
    model: str
    device_bytes: int
    stages: list[Stage]
    where: str = "GPU"  # or "host": a CPU plan (memory/host.py)

    def refusal(self) -> str | None:
        """One line naming the first stage that does not fit and the field to change (None: every stage fits)."""
        for s in self.stages:
            if s.peak + HEADROOM > self.device_bytes:
                return (f"{self.recipe}: stage '{s.name}' needs {s.peak / GIB:.1f} GiB of a {self.device_bytes / GIB:.0f}"
                        f" GiB {self.where} (with {HEADROOM / GIB:.0f} GiB headroom); change {s.field}")
        return None


def slot_rank(rank: int) -> int:
    for r in LORA_RANKS:
        if r >= rank:
            return r
    return rank


def lora_path(recipe, cpu: bool = False) -> str:
    """The candidate path the plan assumes: serve.candidates, with auto as LoRA for a linear merge in a 16-bit
    engine (the fidelity estimate needs the trained directions; GRPO-LoRA updates round away in bf16), except on a
    `cpu`, where auto with eval.dtype auto takes an fp32 engine in place (engine.serving)."""
    s, m = recipe.serve.candidates, recipe.merge
    if s != "auto":
        return s
    linear = m.method == "task_arithmetic" or (m.method == "dare_linear" and m.density >= 1)
    dtype = recipe.eval.dtype if recipe.eval.dtype != "auto" else recipe.model.dtype
    lora = linear and not m.per_direction_density and not m.per_layer_density and dtype != "float32"
    return "lora" if lora and not (cpu and recipe.eval.dtype == "auto") else "inplace"


def direction_ranks(recipe) -> list[int]:
    g = recipe.gradient
    return [(g.jobs[k].lora.r if k < len(g.jobs) and g.jobs[k].lora else g.lora.r) for k in range(g.directions)]


def final_directions(recipe) -> int:
    """Directions the final evaluation's engine holds: K, the baseline and its snapshots."""
    g = recipe.gradient
    steps = [(j.steps or g.steps) for j in g.jobs] + [g.steps] * (g.directions - len(g.jobs))
    baseline = g.baseline_steps or math.ceil(sum(steps) / 0.9)
    snaps = len(range(g.baseline_snapshot_every, baseline, g.baseline_snapshot_every)) if g.baseline_snapshot_every \
        else 0
    return g.directions + 1 + snaps


def trl_vllm_share(recipe, shape: ModelShape, device_bytes: int) -> float:
    """TRL's colocated vLLM share of the card: its weights, the KV cache of one generation batch at full length,
    the activation profile and CUDA graphs, and 1 GiB slack; rounded up to 0.01."""
    g = recipe.gradient
    if g.vllm_gpu_memory_utilization is not None:
        return g.vllm_gpu_memory_utilization
    wb = BYTES[recipe.model.dtype]
    length = g.vllm_max_model_length or recipe.model.max_model_len
    kv = g.batch_size * g.accumulation_steps * length * shape.kv_bytes_per_token()
    need = shape.params * wb + kv + _vllm_activations(shape, length) + CUDA_GRAPHS + GIB
    return math.ceil(100 * need / device_bytes) / 100


def gradient_stage(recipe, shape: ModelShape, device_bytes: int, prompt_tokens: int) -> Stage:
    g = recipe.gradient
    wb = BYTES[recipe.model.dtype]
    b, c = g.batch_size, recipe.completion_cap()
    t = min(recipe.model.max_model_len, prompt_tokens + c)
    lora = shape.lora_params(max(direction_ranks(recipe)), [p for p in PROJECTIONS if p in g.lora.targets])
    work = b * t * (4 * shape.hidden + 2 * shape.kv_heads * shape.head_dim + 3 * shape.intermediate) * wb * 2
    parts = {
        "CUDA context": CUDA_CONTEXT,
        "weights": shape.params * wb,
        "LoRA + grads + Adam (fp32)": 16 * lora,
        "activations (checkpointed)": shape.layers * b * t * shape.hidden * wb + work,
        "logits (micro-batch x completion x vocab)": b * c * shape.vocab * wb * 3 + c * shape.vocab * 4,
    }
    stage = Stage("gradient job", parts, "gradient.batch_size or gradient.max_completion_length")
    if g.use_vllm:
        share = trl_vllm_share(recipe, shape, device_bytes)
        parts["TRL's colocated vLLM"] = int(share * device_bytes)
        stage.settings["gradient.vllm_gpu_memory_utilization"] = share
        stage.notes.append(f"TRL's vLLM at {share:.2f} of the card, max_model_length "
                           f"{g.vllm_max_model_length or recipe.model.max_model_len}")
    stage.notes.append(f"{b} sequences of {t} tokens a micro-batch ({prompt_tokens} prompt + {c} completion)")
    return stage


def _vllm_activations(shape: ModelShape, max_len: int) -> int:
    tokens = max(VLLM_BATCHED_TOKENS, max_len)
    return tokens * (4 * shape.hidden + 2 * shape.intermediate) * 2 + VLLM_MAX_SEQS * shape.vocab * 4 * 2


def engine_stage(recipe, shape: ModelShape, device_bytes: int, name: str, ranks: list[int], max_loras: int,
                 cuda_graphs: bool = True) -> Stage:
    """A resident engine holding `ranks` LoRA directions, serving `max_loras` candidates a batch (LoRA path)."""
    s = recipe.serve
    wb = BYTES[recipe.eval.dtype if recipe.eval.dtype != "auto" else recipe.model.dtype]
    path = lora_path(recipe)
    targets = [p for p in PROJECTIONS if p in recipe.gradient.lora.targets]
    per_rank = shape.lora_params(1, targets)  # Σ (in + out) over the targets of every layer
    max_len = recipe.serve.max_model_len or recipe.model.max_model_len
    inside = {"weights": shape.params * wb, "activation profile": _vllm_activations(shape, max_len)}
    if cuda_graphs:
        inside["CUDA graphs"] = CUDA_GRAPHS
    if path == "lora":
        # vLLM wraps every projection with max_loras slots of max_lora_rank, in the engine's dtype
        inside["LoRA slots"] = max_loras * slot_rank(sum(ranks)) * shape.lora_params(1) * wb
        # the factors stacked once (fp32), and the registered adapters (a batch and set_genome's) on the device
        outside = {"stacked LoRA factors (fp32)": 4 * sum(ranks) * per_rank,
                   "registered adapters": (max_loras + 1) * sum(ranks) * per_rank * wb}
    else:
        numel = shape.numel(targets)
        largest = max(o * i for o, i in map(shape.projection, targets))
        deltas = len(ranks) * numel * BYTES[s.delta_dtype] if s.prepare_deltas else len(ranks) * largest * 4
        outside = {"fp32 masters": 4 * numel, "deltas" + (" (prepared)" if s.prepare_deltas else ""): deltas,
                   "merge temporaries": 3 * largest * 4}
    return _engine(recipe, shape, device_bytes, name, inside, outside, max_len, wb, f"candidates {path}")


def _engine(recipe, shape: ModelShape, device_bytes: int, name: str, inside: dict, outside: dict, max_len: int,
            wb: int, what: str) -> Stage:
    """vLLM's share (serve.gpu_memory_utilization, or what leaves room for `outside`), and the KV cache left in it."""
    serve = recipe.serve
    kv_min = max_len * shape.kv_bytes_per_token(wb)
    outside_total = sum(outside.values())
    util = serve.gpu_memory_utilization
    if util is None:
        util = min(VLLM_MAX_UTIL, math.floor(100 * (device_bytes - outside_total - HEADROOM) / device_bytes) / 100)
    budget = max(0, int(util * device_bytes))
    kv = budget - CUDA_CONTEXT - sum(inside.values())
    parts = {f"vLLM share ({util:.2f})": budget, **{f"{k} (outside vLLM)": v for k, v in outside.items()}}
    field = "serve.gpu_memory_utilization" if serve.gpu_memory_utilization is not None else "model.max_model_len"
    stage = Stage(name, parts, field, settings={"serve.gpu_memory_utilization": util})
    stage.notes.append(f"{what}; inside vLLM's share: " + ", ".join(
        f"{k} {v / GIB:.1f}" for k, v in {"CUDA context": CUDA_CONTEXT, **inside}.items()) +
        f" GiB; KV cache {kv / GIB:.1f} GiB = {max(kv, 0) // shape.kv_bytes_per_token(wb):,} tokens")
    if kv < kv_min:  # vLLM refuses to start without room for one sequence of max_model_len
        stage.parts["KV cache short of one max_model_len sequence"] = kv_min - kv
    return stage


def es_stage(recipe, shape: ModelShape, device_bytes: int, cuda_graphs: bool = True) -> Stage:
    """Full-parameter ES's engine: θ beside vLLM (fp32 master of the ES tensors in place; LoRA factors for
    es.scope lora served as adapters)."""
    es, serve = recipe.es, recipe.serve
    wb = BYTES[recipe.eval.dtype if recipe.eval.dtype != "auto" else recipe.model.dtype]
    max_len = serve.max_model_len or recipe.model.max_model_len
    inside = {"weights": shape.params * wb, "activation profile": _vllm_activations(shape, max_len)}
    if cuda_graphs:
        inside["CUDA graphs"] = CUDA_GRAPHS
    if es.scope == "lora":
        targets = [p for p in PROJECTIONS if p in recipe.gradient.lora.targets]
        r = recipe.gradient.lora.r
        outside = {"θ: LoRA factors (fp32)": 4 * shape.lora_params(r, targets)}
        if recipe.serve.candidates != "inplace":
            inside["LoRA slots"] = es.population * slot_rank(r) * shape.lora_params(1) * wb
    else:
        numel = shape.params if es.scope == "full" else shape.numel()
        largest = max(o * i for o, i in map(shape.projection, PROJECTIONS))
        outside = {"θ: fp32 master": 4 * numel, "noise temporaries": 2 * largest * 4}
    return _engine(recipe, shape, device_bytes, "es engine", inside, outside, max_len, wb, f"es.scope {es.scope}")


def memory_plan(recipe, config: dict, device_bytes: int, *, prompt_tokens: int = 512, where: str = "") -> Plan:
    """Every stage of `hyper-es run` on one GPU of `device_bytes`."""
    if device_bytes <= 0:
        raise HyperESError("--device-memory: expected a positive size such as 80GiB")
    shape = ModelShape.from_config(config, where or "config.json")
    eager = recipe.serve.enforce_eager is True
    ranks = direction_ranks(recipe)
    popsize = recipe.search.popsize or 4 + int(3 * math.log(max(2, len(ranks))))
    stages = [gradient_stage(recipe, shape, device_bytes, prompt_tokens)]
    if recipe.method == "hyper-es":
        stages.append(engine_stage(recipe, shape, device_bytes, "search engine", ranks, popsize, not eager))
        finals = final_directions(recipe)
        stages.append(engine_stage(recipe, shape, device_bytes, "final-evaluation engine",
                                   [recipe.gradient.lora.r] * finals, 1, not eager))
        stages[-1].notes.append(f"{finals} directions (K, the baseline and its snapshots)")
    else:
        stages.append(es_stage(recipe, shape, device_bytes, not eager))
    return Plan(recipe.name, recipe.model.name, device_bytes, stages)


def parse_size(text: str) -> int:
    """'80GiB', '80GB' (10^9), '40 GiB', '81920MiB' → bytes."""
    units = {"gib": GIB, "gb": 10**9, "mib": 1 << 20, "mb": 10**6, "tib": 1 << 40, "tb": 10**12}
    t = text.strip().lower().replace(" ", "")
    for unit, mult in units.items():
        if t.endswith(unit):
            try:
                return int(float(t[: -len(unit)]) * mult)
            except ValueError:
                break
    raise HyperESError(f"--device-memory: expected a size such as 80GiB or 40GB, got '{text}'")
