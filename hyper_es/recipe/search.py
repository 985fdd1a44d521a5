"""The search (CMA-ES over merge coefficients), its fitness, full-parameter ES, evaluation, executor and
co-evolution."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from hyper_es.recipe.fields import NonNegInt, PosInt, Strict


class SearchConfig(Strict):
    """CMA-ES (pycma) over the merge coefficients. What a candidate is scored on is `fitness:`; how an engine serves
    it is `serve:`."""

    sigma0: Annotated[float, Field(gt=0)] = 0.3
    popsize: Annotated[int, Field(ge=2)] | None = None
    bounds: tuple[float, float] = (-1.0, 2.0)
    x0: Literal["zeros", "uniform", "ones"] | list[float] = "uniform"
    scale_scan: list[Annotated[float, Field(ge=0)]] | None = Field(
        None, min_length=2, description="scan these global scales of x0 on the fitness set first; CMA-ES starts "
        "from the best, with sigma0 = the scan's median spacing × the RMS of x0 (sigma0 is then ignored)")
    max_generations: PosInt = 10
    max_evals: PosInt | None = None
    wall_clock_s: Annotated[float, Field(gt=0)] | None = None
    max_tokens: PosInt | None = Field(
        None, description="stop once the search's generated tokens (the scale scan, the fitness scorings and the "
        "per-generation validation re-scores) reach this many; the guard and the rows' scorings come after it")
    recommend: Literal["best_val", "mean"] = Field(
        "best_val", description="the genome the search returns: best_val, the re-scored candidate best on "
        "validation; mean, CMA-ES's mean after the last generation (pycma's xfavorite), the recommendation under "
        "a noisy fitness, which needs no re-scores (fitness.rescore_top may be 0)")
    tracking: Literal["auto", "tensorboard", "wandb", "none"] = Field(
        "auto", description="auto: TensorBoard when installed; wandb: W&B (its own login/env)")

    @field_validator("bounds")
    @classmethod
    def _ordered(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not v[0] < v[1]:
            raise ValueError(f"expected [low, high] with low < high, got {list(v)}")
        return v

    @model_validator(mode="after")
    def _scan_scales_something(self) -> SearchConfig:
        if self.scale_scan and self.x0 == "zeros":
            raise ValueError("scale_scan scales x0, which is all zeros; start from uniform, ones or a list")
        return self


class RaceConfig(Strict):
    """Racing (search/racing.py): each generation's candidates are scored on the first rung of the fitness rows, and
    only those whose place among CMA-ES's parents is in doubt go on; CMA-ES is told the ranking."""

    rungs: list[PosInt] = Field(
        min_length=1, description="cumulative fitness rows (over every searched task) of the rungs before the last; "
        "the last rung is always the whole minibatch")
    delta: Annotated[float, Field(ge=0, lt=1)] = Field(
        0.05, description="a pair is settled when its paired difference is beyond its bound at confidence 1 - delta "
        "(0: nothing settles, every candidate is fully scored)")

    @field_validator("rungs")
    @classmethod
    def _increasing(cls, v: list[int]) -> list[int]:
        if v != sorted(set(v)):
            raise ValueError(f"expected increasing row counts, got {v}")
        return v


class FitnessConfig(Strict):
    """What the search and ES score a candidate on: the tasks' rows, the reward, the decoding, the seed, the
    validation re-scores and the guard."""

    tasks: list[str] | None = Field(None, description="the searched tasks (default: every task with a val split)")
    fitness_set: Literal["per_generation", "fixed"] = Field(
        "per_generation", description="minibatch redrawn every generation, or one fixed draw for the whole search")
    minibatch: PosInt = Field(32, description="train rows per task a candidate is scored on")
    samples: PosInt = Field(1, description="completions per prompt for fitness (> 1 needs temperature > 0)")
    temperature: Annotated[float, Field(ge=0)] = Field(0.0, description="fitness decoding (0: greedy)")
    reward: str | None = Field(None, description="fitness reward (e.g. numeric_partial) instead of each task's own; "
                               "validation, the guard and test keep the task's reward")
    seed: NonNegInt = Field(0, description="the run's seed: fitness minibatches, sampled completions, CMA-ES")
    val_size: PosInt = Field(64, description="validation rows per task (the re-scores, the guard, the final rows' "
                             "validation)")
    rescore_top: NonNegInt = Field(2, description="the best candidates of each generation re-scored on validation "
                                   "(0: none; needs search.recommend: mean)")
    guard: bool = Field(True, description="the final genome must beat x0 on the validation rows, else x0 is kept")
    race: RaceConfig | None = Field(
        None, description="race each generation over rungs of the minibatch (CMA-ES over coefficients; rewards in "
        "[0, 1]); none: every candidate scored on every row")

    @field_validator("reward")
    @classmethod
    def _known_search_reward(cls, v: str | None) -> str | None:
        from hyper_es import rewards

        if v is not None:
            rewards.get(v)
        return v

    @model_validator(mode="after")
    def _samples_need_temperature(self) -> FitnessConfig:
        if self.samples > 1 and self.temperature == 0:
            raise ValueError(f"samples={self.samples} needs temperature > 0 (greedy gives one completion)")
        return self


class GradFitConfig(Strict):
    """The gradient-fitted control (`grad-fit` row): the search's genome fitted by GRPO (TRL's GRPOTrainer, the
    gradient stage's batch, decoding, loss and rewards) with the merge coefficients as the only trained
    parameters, from the search's start, on the search's fitness rows."""

    learning_rate: Annotated[float, Field(gt=0)] = Field(0.05, description="Adam's step on the coefficients")
    budget: Literal["tokens", "seconds"] = Field(
        "tokens", description="what it is given of the search stage's: its generated tokens (scan, fitness and "
        "validation re-scores), or its wall seconds (where generating for GRPO is far slower than the search's engine)")
    max_tokens: PosInt | None = Field(
        None, description="stop once its generated tokens reach this many (default: the search's, with budget: tokens)")
    max_steps: PosInt = Field(200, description="optimizer steps at most")


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
    merges: list[str] = Field(default_factory=list, description=(
        "merge-<method> rows: the search's directions merged by each method at mergekit's defaults (weight 1 each), "
        "scaled by one lambda from search.scale_scan chosen on validation (composition's controls)"))

    @field_validator("merges")
    @classmethod
    def _known_methods(cls, v: list[str]) -> list[str]:
        from hyper_es.recipe.training import METHODS

        bad = [m for m in v if m not in METHODS]
        if bad or len(set(v)) != len(v):
            raise ValueError(f"expected distinct methods among {', '.join(METHODS)}, got {v}")
        return v

    @model_validator(mode="after")
    def _n_covers_k(self) -> EvalConfig:
        if self.n is not None and self.n < max(self.k):
            raise ValueError(f"n ({self.n}) must be >= the largest k ({max(self.k)})")
        return self


class ESConfig(Strict):
    """Full-parameter evolution strategies (hyper_es.es): member i is θ + σ·εᵢ, with εᵢ generated in the engine
    from (seed, tensor name); θ ← θ + α/(Nσ)·Σ zᵢ·εᵢ. Fitness rows, reward, guard and validation: `fitness`, as the search's."""

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
    isolate: Literal["auto", "always", "never"] = Field(
        "auto", description="auto: each local GRPO job and each stage of `hyper-es run` in a child process of its own "
        "when CUDA is present, so each starts on an empty card (an engine's memory is not given back in-process); "
        "always: also on CPU (a few seconds per child); never: everything in this process")


class PromptSpace(Strict):
    """The prompt genes of one task (co-evolution): each list holds alternatives to the task's own prompt part, which
    is always gene 0 (the start)."""

    systems: list[str | None] = Field(default_factory=list, description="alternative system turns (null: none)")
    templates: list[str] = Field(default_factory=list, description="alternative user templates ({question}, ...)")
    formats: list[str] = Field(default_factory=list, description="answer-format lines appended to the user turn")
    tools: list[dict[str, str]] = Field(
        default_factory=list, description="an environment task's alternative tool descriptions: each maps tool names "
        "to a description (the tools it does not name keep their docstring's)")
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
    controls: list[str] = Field(default_factory=list, description=(
        "rows (base, scaled, baseline, baseline@N, a direction) also evaluated as <row>+prompt: their weights with, "
        "per task, the best of its own prompt and each one-gene change of it (a system turn, template, format "
        "line or tool descriptions above), chosen on validation: the prompt control the co-evolution must beat"))

    @model_validator(mode="after")
    def _elite_fits(self) -> CoevolveConfig:
        if self.elite > self.population:
            raise ValueError(f"elite ({self.elite}) must be at most population ({self.population})")
        return self
