"""The model, the gradient stage (GRPO-LoRA jobs) and the merge."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from hyper_es.recipe.fields import Dtype, NonNegInt, PosInt, Strict

# The merge registry (here, torch-free, so the schema can list it; merging reads it): method -> (sparsification,
# sign consensus).
METHODS: dict[str, tuple[str | None, bool]] = {
    "dare_ties": ("dare", True),
    "ties": ("magnitude", True),
    "task_arithmetic": (None, False),
    "dare_linear": ("dare", False),
}


def idle_density(method: str, density: float, genes: str | None = None) -> str | None:
    """Why a density (or density genes) would change nothing under `method` (it keeps every entry), else None."""
    if METHODS[method][0] is None and (genes or density < 1):
        return (f"method {method} keeps every entry, so {genes or f'density {density:g}'} would change nothing; "
                f"expected a sparsifying method (dare_ties, dare_linear, ties), or density 1 without density genes")
    return None


class ModelConfig(Strict):
    name: str
    revision: str | None = None
    dtype: Dtype = "float32"
    trust_remote_code: bool = False
    max_model_len: PosInt = 2048


class LoraConfig(Strict):
    r: PosInt = 8
    alpha: Annotated[float, Field(gt=0)] = 16.0
    dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0
    targets: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        min_length=1,
    )
    rslora: bool = False


class JobOverride(Strict):
    """Per-direction overrides of the gradient stage's defaults."""

    name: str | None = None
    seed: NonNegInt | None = None
    learning_rate: Annotated[float, Field(gt=0)] | None = None
    steps: PosInt | None = None
    shard: NonNegInt | None = None
    lora: LoraConfig | None = None


class GradientConfig(Strict):
    """K short GRPO-LoRA jobs (TRL GRPOTrainer + PEFT); each gives one direction."""

    tasks: list[str] | None = None
    directions: PosInt = 3
    vary: list[Literal["seed", "shard", "learning_rate", "difficulty", "task"]] = Field(
        default_factory=lambda: ["seed"], description="what differs between the jobs: seed, shard, learning_rate, "
        "difficulty (bins of the base model's pass rate), task (one task per job, or per group of jobs)")
    difficulty_rows: PosInt = Field(256, description="vary: difficulty: the first N train rows of each task whose "
                                    "base pass rate is measured; the jobs train on bins of them")
    difficulty_samples: Annotated[int, Field(ge=2)] = Field(
        4, description="vary: difficulty: completions per row for the pass rate (at the gradient temperature)")
    jobs: list[JobOverride] = Field(default_factory=list)
    steps: PosInt = 20
    learning_rate: Annotated[float, Field(gt=0)] = 1e-4
    batch_size: PosInt = 8
    accumulation_steps: PosInt = Field(
        1, description="batches per optimizer step (TRL's gradient_accumulation_steps): a step sees batch_size × N "
        "completions, generated together")
    num_generations: Annotated[int, Field(ge=2)] = 4
    max_completion_length: PosInt = 64
    temperature: Annotated[float, Field(gt=0)] = 1.0
    beta: Annotated[float, Field(ge=0)] = 0.0
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo"] = "dapo"
    scale_rewards: Literal["group", "batch", "none"] = "group"
    lora: LoraConfig = Field(default_factory=LoraConfig)
    rewards: dict[str, float] | None = Field(
        None, description="train on these rewards {name: weight} instead of each task's own (e.g. a dense one)")
    use_vllm: bool = False
    vllm_gpu_memory_utilization: Annotated[float, Field(gt=0, lt=1)] | None = Field(
        None, description="use_vllm: TRL's colocated vLLM share of the GPU; none: from the memory plan (its weights, "
        "one generation batch's KV cache at vllm_max_model_length, activations, CUDA graphs)")
    vllm_max_model_length: PosInt | None = Field(
        None, description="use_vllm: the context of TRL's vLLM; none: model.max_model_len (TRL's own default is the "
        "model's full context: 32k for Qwen2.5, 131k for R1-Distill)")
    seed: NonNegInt = 0
    checkpoint_every: NonNegInt = Field(0, description="TRL checkpoint every N steps (0: a killed job restarts)")
    baseline_steps: PosInt | None = Field(None, description="GRPO-LoRA baseline steps (default: directions' / 0.9)")
    baseline_snapshot_every: NonNegInt = Field(
        0, description="save the baseline's adapter every N steps (its accuracy-vs-steps curve); 0: final only")
    baseline_start: str | None = Field(
        None, description="the name of one of directions.adapters: the baseline's LoRA trains on base + that "
        "adapter's ΔW (an adapter trained further), and its rows are base + both updates; none: from the base")
    lora_seed: NonNegInt | None = Field(
        None, description="seed of the LoRA initialisation, shared by every job (jobs then differ only by data "
        "seed, shard or lr, and their directions share A's row space); None: each job's seed, as TRL does")
    directions_from: Literal["jobs", "snapshots"] = Field(
        "jobs", description="jobs: K independent GRPO-LoRA jobs; snapshots: the increments of the baseline run "
        "between its adapters at the jobs' cumulative steps (ExPO-style; all coefficients 1 = that adapter)")

    @field_validator("rewards")
    @classmethod
    def _known_rewards(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        from hyper_es import rewards

        for name in v or {}:
            rewards.get(name)
        if v is not None and not v:
            raise ValueError("expected at least one reward, or leave rewards unset")
        return v

    @model_validator(mode="after")
    def _check(self) -> GradientConfig:
        if self.batch_size % self.num_generations:
            raise ValueError(
                f"batch_size ({self.batch_size}) must be divisible by num_generations ({self.num_generations})"
            )
        if len(self.jobs) > self.directions:
            raise ValueError(f"{len(self.jobs)} jobs given but directions is {self.directions}")
        if "difficulty" in self.vary and "shard" in self.vary:
            raise ValueError("vary: difficulty and shard both split the train rows; use one of them")
        if self.directions_from == "snapshots":
            if {"difficulty", "task", "shard"} & set(self.vary):
                raise ValueError(f"directions_from: snapshots makes every direction from one run on all the data, "
                                 f"so vary cannot split it ({', '.join(self.vary)})")
            total = sum((j.steps if j.steps else self.steps) for j in self.jobs) + self.steps * (
                self.directions - len(self.jobs))
            if self.baseline_steps is not None and self.baseline_steps < total:
                raise ValueError(f"directions_from: snapshots takes {total} steps of the baseline run, but "
                                 f"baseline_steps is {self.baseline_steps}")
            if any(j.lora or j.learning_rate or j.seed is not None or j.shard is not None for j in self.jobs):
                raise ValueError("directions_from: snapshots: jobs may set only name and steps (one run makes them)")
        return self


# merge.genome presets, coarse to fine: the layout fields each sets
GENOME_PRESETS = {"direction": {"layer_group_size": "all", "module_groups": False},
                  "module": {"layer_group_size": "all", "module_groups": True},
                  "layer": {"module_groups": True}}


class MergeConfig(Strict):
    method: Literal[tuple(METHODS)] = "dare_ties"  # type: ignore[valid-type]  (the merge registry)
    density: Annotated[float, Field(gt=0, le=1)] = 1.0
    rescale: Literal["l1", "inverse"] = "l1"
    consensus: Literal["sum", "count"] = "sum"
    normalize: bool = False
    lam: float = 1.0
    genome: Literal["direction", "module", "layer"] | None = Field(
        None, description="a preset, coarse to fine: direction (one coefficient per direction), module (per direction "
        "× module group), layer (per layer group × direction × module group); it sets layer_group_size (all, all, "
        "as given) and module_groups (false, true, true)")
    layer_group_size: PosInt | Literal["all"] = Field(1, description="layers per coefficient; all: one group")
    module_groups: bool = False
    per_direction_density: bool = Field(False, description="search one DARE density per direction")
    per_layer_density: bool = Field(
        False, description="search one DARE density per layer group per direction, beside its coefficient (the "
        "TIES weight): the paper's genome")
    seed: NonNegInt = 0

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data):
        preset = data.get("genome") if isinstance(data, dict) else None
        if preset not in GENOME_PRESETS:
            return data
        for key, value in GENOME_PRESETS[preset].items():  # a field at its default (a dumped recipe) gives way
            if key in data and data[key] not in (value, cls.model_fields[key].default):
                raise ValueError(f"genome: {preset} sets {key}: {value}, got {key}: {data[key]}; remove {key} or "
                                 f"the preset")
        return {**data, **GENOME_PRESETS[preset]}

    @model_validator(mode="after")
    def _density_layout(self) -> MergeConfig:
        if self.per_direction_density and self.per_layer_density:
            raise ValueError("per_direction_density and per_layer_density: choose one density layout")
        genes = "per_direction_density" if self.per_direction_density else "per_layer_density" if \
            self.per_layer_density else None
        if why := idle_density(self.method, self.density, genes):  # nothing sparsifies: searched for nothing
            raise ValueError(why)
        return self
