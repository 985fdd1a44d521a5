"""Recipe schema: one validated YAML file drives the whole pipeline (tasks → directions → merge → search → eval)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from hyper_es.errors import RecipeError

# The merge registry (here, torch-free, so the schema can list it; merging reads it): method -> (sparsification,
# sign consensus).
METHODS: dict[str, tuple[str | None, bool]] = {
    "dare_ties": ("dare", True),
    "ties": ("magnitude", True),
    "task_arithmetic": (None, False),
    "dare_linear": ("dare", False),
}

PosInt = Annotated[int, Field(gt=0)]
NonNegInt = Annotated[int, Field(ge=0)]
Dtype = Literal["float32", "bfloat16", "float16"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False, validate_assignment=True)


# --- data sources --------------------------------------------------------------------------------------------------
class ReasoningGymSource(Strict):
    """Procedurally generated data from a reasoning-gym generator (seeded, unlimited).

    `partition: question` (default): the task's generated splits share one generator and config, and each distinct
    question belongs to one split, chosen by a hash of its text (each split's share of the hash range is its share
    of the sizes); a split holds `size` distinct questions. `none`: the split is the generator's first `size` items
    (repeats kept), and train drops the questions of the other splits."""

    source: Literal["reasoning_gym"]
    dataset: str
    size: PosInt
    seed: NonNegInt = 0
    config: dict[str, Any] = Field(default_factory=dict)
    partition: Literal["question", "none"] = "question"


class FileSource(Strict):
    """A local JSONL / JSON / Parquet / CSV file; relative paths are relative to the recipe file."""

    source: Literal["file"]
    path: str
    format: Literal["jsonl", "json", "parquet", "csv"] | None = None
    fields: dict[str, str] = Field(default_factory=dict, description="rename columns: {our_name: file_column}")
    limit: PosInt | None = None


class HFSource(Strict):
    """Anything `datasets.load_dataset` reads: a local folder/script, or a hub id where the hub is reachable."""

    source: Literal["hf"]
    path: str
    name: str | None = None
    split: str = "test"
    data_files: str | list[str] | dict[str, str] | None = None
    fields: dict[str, str] = Field(default_factory=dict)
    limit: PosInt | None = None


class BuiltinSource(Strict):
    """A held-out test set shipped in the project's `data/` folder (see data/README.md)."""

    source: Literal["builtin"]
    name: str
    limit: PosInt | None = None


Source = Annotated[Union[ReasoningGymSource, FileSource, HFSource, BuiltinSource], Field(discriminator="source")]
SOURCE_TAGS = ("reasoning_gym", "file", "hf", "builtin")


# --- tasks ---------------------------------------------------------------------------------------------------------
class PromptConfig(Strict):
    system: str | None = None
    template: str = "{question}"
    few_shot: NonNegInt = 0
    shot_answer: str = "{answer}"
    chat: bool = True
    truncate: bool = False  # cut a question whose prompt does not fit in model.max_model_len (else: refused)


class TaskConfig(Strict):
    """Data splits + prompt format + reward."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]+$")]
    train: Source | None = None
    val: Source | None = None
    test: Source | None = None
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    reward: str
    reference: str | list[str] = "answer"
    max_tokens: PosInt = 256
    stop: list[str] = Field(default_factory=list)
    weight: Annotated[float, Field(gt=0)] = 1.0

    @field_validator("reward")
    @classmethod
    def _known_reward(cls, v: str) -> str:
        from hyper_es import rewards

        rewards.get(v)  # raises ValueError naming the registered rewards, or the import problem
        return v

    @model_validator(mode="after")
    def _has_data(self) -> TaskConfig:
        if not (self.train or self.val or self.test):
            raise ValueError("a task needs at least one of train, val, test")
        if self.prompt.few_shot and self.train is None:
            raise ValueError("prompt.few_shot > 0 draws examples from the train split, but this task has none")
        parts = {s: src for s in ("train", "val", "test") if isinstance(src := getattr(self, s), ReasoningGymSource)
                 and src.partition == "question"}
        first = next(iter(parts), None)
        for s, src in parts.items():
            if (src.dataset, src.config) != (parts[first].dataset, parts[first].config):
                raise ValueError(f"{s}: with partition 'question' the generated splits share one generator and "
                                 f"config ({first}: '{parts[first].dataset}' {parts[first].config}, {s}: "
                                 f"'{src.dataset}' {src.config}); set partition: none on each to keep them apart")
        return self


# --- stages --------------------------------------------------------------------------------------------------------
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
    seed: NonNegInt = 0
    checkpoint_every: NonNegInt = Field(0, description="TRL checkpoint every N steps (0: a killed job restarts)")
    baseline_steps: PosInt | None = Field(None, description="GRPO-LoRA baseline steps (default: directions' / 0.9)")
    baseline_snapshot_every: NonNegInt = Field(
        0, description="save the baseline's adapter every N steps (its accuracy-vs-steps curve); 0: final only")
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


class MergeConfig(Strict):
    method: Literal[tuple(METHODS)] = "dare_ties"  # type: ignore[valid-type]  (the merge registry)
    density: Annotated[float, Field(gt=0, le=1)] = 1.0
    rescale: Literal["l1", "inverse"] = "l1"
    consensus: Literal["sum", "count"] = "sum"
    normalize: bool = False
    lam: float = 1.0
    layer_group_size: PosInt = 1
    module_groups: bool = False
    per_direction_density: bool = Field(False, description="search one DARE density per direction")
    per_layer_density: bool = Field(
        False, description="search one DARE density per layer group per direction, beside its coefficient (the "
        "TIES weight): the paper's genome")
    seed: NonNegInt = 0

    @model_validator(mode="after")
    def _density_layout(self) -> MergeConfig:
        if self.per_direction_density and self.per_layer_density:
            raise ValueError("per_direction_density and per_layer_density: choose one density layout")
        return self


class SearchConfig(Strict):
    """CMA-ES (pycma) over the merge coefficients."""

    tasks: list[str] | None = None
    sigma0: Annotated[float, Field(gt=0)] = 0.3
    popsize: Annotated[int, Field(ge=2)] | None = None
    bounds: tuple[float, float] = (-1.0, 2.0)
    x0: Literal["zeros", "uniform", "ones"] | list[float] = "uniform"
    scale_scan: list[Annotated[float, Field(ge=0)]] | None = Field(
        None, min_length=2, description="scan these global scales of x0 on the fitness set first; CMA-ES starts "
        "from the best, with sigma0 = the scan's median spacing × the RMS of x0 (sigma0 is then ignored)")
    fitness_set: Literal["per_generation", "fixed"] = Field(
        "per_generation", description="minibatch redrawn every generation, or one fixed draw for the whole search")
    reward: str | None = Field(None, description="fitness reward (e.g. numeric_partial) instead of each task's own; "
                               "validation, the guard and test keep the task's reward")
    guard: bool = Field(True, description="the final genome must beat x0 on the validation rows, else x0 is kept")
    seed: NonNegInt = 0
    max_generations: PosInt = 10
    max_evals: PosInt | None = None
    wall_clock_s: Annotated[float, Field(gt=0)] | None = None
    minibatch: PosInt = 32
    samples: PosInt = Field(1, description="completions per prompt for fitness (> 1 needs temperature > 0)")
    temperature: Annotated[float, Field(ge=0)] = Field(0.0, description="fitness decoding (0: greedy)")
    val_size: PosInt = 64
    rescore_top: PosInt = 2
    tracking: Literal["auto", "tensorboard", "wandb", "none"] = Field(
        "auto", description="auto: TensorBoard when installed; wandb: W&B (its own login/env)")
    merge_device: Literal["auto", "cpu"] = Field(
        "auto", description="where the engine (vLLM worker or HF) keeps the deltas: auto = the engine's device")
    prepare_deltas: bool = Field(True, description="keep K sparsified deltas (fast); false: recompute from LoRA")
    delta_dtype: Literal["float32", "bfloat16"] = "float32"
    compile_merge: bool = Field(True, description="merge with the torch.compile'd combine (falls back to eager)")
    candidates: Literal["auto", "inplace", "lora"] = Field(
        "auto", description="how a vLLM engine serves a candidate (search and ES): inplace writes base + ΔW into its "
        "weights; lora serves ΔW as a LoRA adapter (linear merges of LoRA directions, es.scope lora), a whole "
        "generation in one call; auto: lora when the merge is linear and the in-place fidelity estimate for the "
        "engine dtype is above 10%")

    @field_validator("bounds")
    @classmethod
    def _ordered(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not v[0] < v[1]:
            raise ValueError(f"expected [low, high] with low < high, got {list(v)}")
        return v

    @field_validator("reward")
    @classmethod
    def _known_search_reward(cls, v: str | None) -> str | None:
        from hyper_es import rewards

        if v is not None:
            rewards.get(v)
        return v

    @model_validator(mode="after")
    def _samples_need_temperature(self) -> SearchConfig:
        if self.scale_scan and self.x0 == "zeros":
            raise ValueError("scale_scan scales x0, which is all zeros; start from uniform, ones or a list")
        if self.samples > 1 and self.temperature == 0:
            raise ValueError(f"samples={self.samples} needs temperature > 0 (greedy gives one completion)")
        return self


class EvalConfig(Strict):
    backend: Literal["vllm", "hf"] = "vllm"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="engines' dtype (search and evaluation); auto: model.dtype")
    k: list[PosInt] = Field(default_factory=lambda: [1], min_length=1)
    n: PosInt | None = None
    temperature: Annotated[float, Field(ge=0)] = 1.0
    top_p: Annotated[float, Field(gt=0, le=1)] = 1.0
    batch_size: PosInt = 32
    seed: NonNegInt = 0
    limit: PosInt | None = None
    snapshots: Literal["all", "best"] = Field(
        "all", description="baseline snapshots scored on test: all (the accuracy-vs-steps curve), or only the best "
        "by validation (the early-stopped baseline; saves test time)")
    pass_k_limit: PosInt | None = Field(
        None, description="sample Pass@k on only the first N test problems per task (greedy still on all)")
    pass_k_tasks: list[str] | None = Field(
        None, description="the tasks sampled for Pass@k (default: every task with a test split; greedy still on all)")

    @model_validator(mode="after")
    def _n_covers_k(self) -> EvalConfig:
        if self.n is not None and self.n < max(self.k):
            raise ValueError(f"n ({self.n}) must be >= the largest k ({max(self.k)})")
        return self


class ESConfig(Strict):
    """Full-parameter evolution strategies (hyper_es.es): member i is θ + σ·εᵢ, with εᵢ generated in the engine
    from (seed, tensor name); θ ← θ + α/(Nσ)·Σ zᵢ·εᵢ. Fitness rows, reward, guard and validation: as `search`."""

    scope: Literal["full", "all_linear", "lora"] = Field(
        "all_linear", description="full: every tensor of the checkpoint; all_linear: the 2-D weights in the layers; "
        "lora: the factors of a LoRA shaped as gradient.lora (r, alpha, targets), A at PEFT's Gaussian init, B zero")
    population: Annotated[int, Field(ge=2)] = 16
    iterations: PosInt = Field(10, description="iterations (the σ schedule's horizon)")
    max_tokens: PosInt | None = Field(
        None, description="stop once the members' fitness generations reach this many tokens (an equal budget)")
    sigma: Annotated[float, Field(gt=0)] = 1e-3
    sigma_schedule: Literal["constant", "linear", "cosine"] = "constant"
    sigma_min: Annotated[float, Field(ge=0)] = 0.0
    warmup: NonNegInt = 0
    alpha: Annotated[float, Field(gt=0)] = Field(
        5e-7, description="step α of θ ← θ + α/(Nσ)·Σ zᵢεᵢ; an update written α'/N·Σ zᵢεᵢ (α' = 5e-4 at σ = 1e-3 in "
        "the ES-at-scale study) is alpha = α'·σ here")
    normalise: Literal["zscore", "centred_rank", "none"] = "zscore"
    noise: Literal["table", "generator"] = Field(
        "table", description="table: windows of one shared table of normals at offsets hashed from (seed, tensor) "
        "(fast); generator: a seeded generator per (seed, tensor) (the runs before the table; about 0.27 s per 1e8 "
        "entries and core)")
    antithetic: bool = False
    seed: NonNegInt = 0
    then: Literal["none", "grpo"] = Field(
        "none", description="grpo: ES → GRPO-LoRA, a job with the baseline's settings trained on ES's weights")
    start: Literal["base", "baseline", "hyper-es"] = Field(
        "base", description="where ES starts: the base, or the run's GRPO-LoRA baseline or Hyper-ES weights "
        "(GRPO→ES and Hyper-ES→ES sequencing; the run's stage must be finished)")

    @model_validator(mode="after")
    def _even_pairs(self) -> ESConfig:
        if self.antithetic and self.population % 2:
            raise ValueError(f"antithetic pairs need an even population, got {self.population}")
        if self.sigma_min > self.sigma:
            raise ValueError(f"sigma_min ({self.sigma_min}) must not exceed sigma ({self.sigma})")
        return self


class Resources(Strict):
    """Ray resources of one task or actor."""

    num_cpus: Annotated[float, Field(ge=0)] = 1.0
    num_gpus: Annotated[float, Field(ge=0)] = 0.0


class ExecutorConfig(Strict):
    """Where the gradient jobs and the fitness evaluations run: this process (`local`), or a Ray cluster."""

    kind: Literal["local", "ray"] = "local"
    address: str | None = Field(None, description="a running cluster (host:port, or auto); none: start a local one")
    num_cpus: PosInt | None = Field(None, description="CPUs of a local cluster started here (none: all)")
    job: Resources = Field(default_factory=Resources, description="per gradient job")
    engine: Resources = Field(default_factory=Resources, description="per engine actor")
    engines: PosInt = Field(1, description="engine actors in the pool")
    max_retries: NonNegInt = Field(2, description="a gradient job whose worker dies is retried (from its checkpoint)")


class PromptSpace(Strict):
    """The prompt genes of one task (co-evolution): each list holds alternatives to the task's own prompt part, which
    is always gene 0 (the start)."""

    systems: list[str | None] = Field(default_factory=list, description="alternative system turns (null: none)")
    templates: list[str] = Field(default_factory=list, description="alternative user templates ({question}, ...)")
    formats: list[str] = Field(default_factory=list, description="answer-format lines appended to the user turn")
    max_shots: NonNegInt = Field(3, description="few-shot examples at most, each a train row the genome picks")
    propose: NonNegInt = Field(0, description="rewrites of the task's template the proposer model is asked for once, "
                               "before the search; those that keep its placeholders are added to templates "
                               "(RUN/proposals.json)")


class CoevolveConfig(Strict):
    """Prompt–parameter co-evolution: every parameter candidate is scored with prompts from a population."""

    tasks: dict[str, PromptSpace] = Field(min_length=1, description="task name: its prompt genes")
    population: PosInt = Field(4, description="prompts per generation")
    elite: PosInt = Field(2, description="best prompts kept each generation; the rest are their mutants")
    pairs: PosInt = Field(1, description="prompts each parameter candidate is scored with (its fitness: their mean)")
    weights: Literal["search", "fixed"] = Field(
        "search", description="search: the parameters evolve with the prompts; fixed: they stay at the search's "
        "start x0 and only the prompts evolve, for as many scorings as the search would make (the prompt-only "
        "ablation)")
    proposer: str | None = Field(None, description="the model that proposes template rewrites (a model.name); "
                                 "default: the recipe's model")
    seed: int = 0

    @model_validator(mode="after")
    def _elite_fits(self) -> CoevolveConfig:
        if self.elite > self.population:
            raise ValueError(f"elite ({self.elite}) must be at most population ({self.population})")
        return self


class Recipe(Strict):
    name: str
    model: ModelConfig
    tasks: list[TaskConfig] = Field(min_length=1)
    gradient: GradientConfig = Field(default_factory=GradientConfig)
    merge: MergeConfig = Field(default_factory=MergeConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    es: ESConfig = Field(default_factory=ESConfig)
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    coevolve: CoevolveConfig | None = Field(None, description="co-evolve prompts with the parameters (none: fixed)")
    method: Literal["hyper-es", "es"] = Field(
        "hyper-es", description="what `hyper-es run` trains besides the GRPO-LoRA baseline: Hyper-ES (directions + "
        "search), or full-parameter ES (the `es` section)")
    threads: PosInt = Field(1, description="torch intra-op threads (1 when another process shares the cores)")

    _path: Path | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _cross_refs(self) -> Recipe:
        if self.method == "es" and self.es.start == "hyper-es":
            raise ValueError("@es.start: hyper-es needs method: hyper-es (a method: es run has no search); "
                             "expected base or baseline")
        names = [t.name for t in self.tasks]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"@tasks: task names must be unique; repeated: {', '.join(dup)}")
        for stage, split in (("gradient", "train"), ("search", "val")):
            for i, ref in enumerate(getattr(self, stage).tasks or []):
                if ref not in names:
                    raise ValueError(f"@{stage}.tasks[{i}]: unknown task '{ref}'; expected one of: {', '.join(names)}")
                if getattr(self.task(ref), split) is None:
                    raise ValueError(f"@{stage}.tasks[{i}]: task '{ref}' has no {split} split")
        for i, ref in enumerate(self.eval.pass_k_tasks or []):
            if ref not in names or self.task(ref).test is None:
                raise ValueError(f"@eval.pass_k_tasks[{i}]: '{ref}' is not a task with a test split; expected one of: "
                                 f"{', '.join(t.name for t in self.tasks if t.test is not None)}")
        for ref in self.coevolve.tasks if self.coevolve else []:
            if ref not in names:
                raise ValueError(f"@coevolve.tasks.{ref}: unknown task; expected one of: {', '.join(names)}")
            if self.task(ref).train is None and self.coevolve.tasks[ref].max_shots:
                raise ValueError(f"@coevolve.tasks.{ref}.max_shots: few-shot examples come from the train split, "
                                 f"but task '{ref}' has none; expected 0")
        g, trained = self.gradient, self.training_task_names()
        if "task" in g.vary and trained and g.directions % len(trained):
            raise ValueError(f"@gradient.directions: vary: task gives each of the {len(trained)} training tasks the "
                             f"same number of jobs; expected a multiple of {len(trained)}, got {g.directions}")
        return self

    def training_task_names(self) -> list[str]:
        """The gradient stage's tasks: `gradient.tasks`, else every task with a train split."""
        return self.gradient.tasks or [t.name for t in self.tasks if t.train is not None]

    @property
    def base_dir(self) -> Path:
        """Folder that relative paths in the recipe are resolved against."""
        return self._path.parent if self._path else Path.cwd()

    def task(self, name: str) -> TaskConfig:
        for t in self.tasks:
            if t.name == name:
                return t
        raise KeyError(f"unknown task '{name}'; expected one of: {', '.join(t.name for t in self.tasks)}")

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


# --- loading with one clear line per error ------------------------------------------------------------------------
def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in SOURCE_TAGS or str(part).startswith(("function-", "tagged-union")):
            continue  # pydantic's union-branch markers say nothing to a recipe author
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The pydantic model that owns the field at `loc` (best effort, for 'expected one of' hints)."""
    import typing

    model: Any = Recipe
    for part in loc[:-1]:
        if isinstance(part, int) or part in SOURCE_TAGS:
            if part in SOURCE_TAGS:
                model = {"reasoning_gym": ReasoningGymSource, "file": FileSource, "hf": HFSource,
                         "builtin": BuiltinSource}[part]
            continue
        if not (isinstance(model, type) and issubclass(model, BaseModel)) or part not in model.model_fields:
            return None
        ann = model.model_fields[part].annotation
        cands = [a for a in _flatten(ann, typing) if isinstance(a, type) and issubclass(a, BaseModel)]
        model = cands[0] if len(cands) == 1 else (cands or [None])[0]
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _flatten(ann: Any, typing: Any) -> list:
    args = typing.get_args(ann)
    if not args:
        return [ann]
    return [x for a in args for x in _flatten(a, typing)]


def _message(err: dict) -> str:
    kind, msg, loc = err["type"], err["msg"], err["loc"]
    if kind == "extra_forbidden":
        owner = _model_at(loc)
        allowed = f"; expected one of: {', '.join(owner.model_fields)}" if owner else ""
        return f"unknown field '{loc[-1]}'{allowed}"
    if kind == "missing":
        return "required field is missing"
    if kind == "union_tag_invalid":
        return f"unknown source {err['input'].get('source')!r}; expected one of: {', '.join(SOURCE_TAGS)}"
    if kind == "union_tag_not_found":
        return f"missing 'source'; expected one of: {', '.join(SOURCE_TAGS)}"
    msg = msg.removeprefix("Value error, ").replace("Input should be", "expected")
    if kind not in ("value_error", "assertion_error") and "input" in err and not isinstance(err["input"], dict):
        msg += f", got {err['input']!r}"
    return msg


def _line(path: str | Path, err: dict) -> str:
    msg = _message(err)
    if msg.startswith("@"):  # cross-field checks carry their own field path: "@gradient.tasks[0]: ..."
        return f"{path}: {msg[1:]}"
    return f"{path}: {_loc(err['loc'])}: {msg}"


def format_validation_error(path: str | Path, exc: ValidationError) -> str:
    return "\n".join(_line(path, e) for e in exc.errors())


def recipe_from_dict(data: Any, path: str | Path = "<recipe>") -> Recipe:
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: expected a mapping of recipe fields at the top level, got {type(data).__name__}")
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        raise RecipeError(format_validation_error(path, exc)) from None
    if isinstance(path, Path):
        recipe._path = path.resolve()
    return recipe


def pin_run_partitions(data: Any) -> Any:
    """A run folder's recipe.yaml written before `partition` existed: its generated splits were per-seed streams
    (`partition: none`). Every recipe.yaml a run folder gets since names its partition, so a missing one is old."""
    for task in (data.get("tasks") if isinstance(data, dict) else None) or []:
        for split in ("train", "val", "test"):
            src = task.get(split) if isinstance(task, dict) else None
            if isinstance(src, dict) and src.get("source") == "reasoning_gym" and "partition" not in src:
                src["partition"] = "none"
    return data


def load_run_recipe(run_dir: str | Path) -> Recipe:
    """RUN/recipe.yaml, as the run was made (old generated splits keep their partition: none)."""
    path = Path(run_dir) / "recipe.yaml"
    return recipe_from_dict(pin_run_partitions(_read_yaml(path)), path)


def load_recipe(path: str | Path) -> Recipe:
    """Read and validate a recipe YAML. Raises RecipeError with one line per problem: file, field path, expectation."""
    return recipe_from_dict(_read_yaml(Path(path)), Path(path))


def _read_yaml(path: Path) -> Any:
    if not path.is_file():
        raise RecipeError(f"{path}: no such recipe file")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise RecipeError(f"{path}: invalid YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    except UnicodeDecodeError as exc:
        raise RecipeError(f"{path}: not UTF-8 text ({exc.reason})") from None
    return data
