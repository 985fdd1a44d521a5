"""A task's data sources, prompt format and reward."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Field, field_validator, model_validator

from hyper_es.recipe.fields import NonNegInt, PosInt, Strict


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


class EnvironmentSource(Strict):
    """Episodes of a shipped environment (`calculator`, `guess`): `size` rows at `horizon`, drawn from `seed` (give
    each split its own seed). A user's environment takes its rows from a file: a `prompt` and the fields its
    `reset` takes."""

    source: Literal["environment"]
    name: Literal["calculator", "guess"]
    size: PosInt
    seed: NonNegInt = 0
    horizon: PosInt = 1


Source = Annotated[Union[ReasoningGymSource, FileSource, HFSource, BuiltinSource, EnvironmentSource],
                   Field(discriminator="source")]
SOURCE_TAGS = ("reasoning_gym", "file", "hf", "builtin", "environment")


# --- tasks ---------------------------------------------------------------------------------------------------------
class PromptConfig(Strict):
    system: str | None = None
    template: str = "{question}"
    few_shot: NonNegInt = 0
    shot_answer: str = "{answer}"
    chat: bool = True
    truncate: bool = False  # cut a question whose prompt does not fit in model.max_model_len (else: refused)


class EnvironmentConfig(Strict):
    """A multi-turn task's environment (TRL's `environment_factory` shape, see docs/environments.md) and the limits
    of each episode: `max_turns` completions, `max_tokens` generated tokens in all (each completion capped by
    `turn_tokens` too), `wall_s` seconds."""

    factory: str = Field(description="a shipped environment (calculator, guess) or 'package.module:Class'")
    max_turns: PosInt = 4
    max_tokens: PosInt = 512
    turn_tokens: PosInt = 128
    wall_s: Annotated[float, Field(gt=0)] = 600.0

    @field_validator("factory")
    @classmethod
    def _known_environment(cls, v: str) -> str:
        from hyper_es.environments import load_environment

        load_environment(v)  # raises naming the class and what is wrong with it
        return v


class TaskConfig(Strict):
    """Data splits + prompt format + reward; or, with `environment`, multi-turn episodes whose reward is the
    environment's."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]+$")]
    train: Source | None = None
    val: Source | None = None
    test: Source | None = None
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    reward: str | None = None
    environment: EnvironmentConfig | None = None
    reference: str | list[str] = "answer"
    max_tokens: PosInt = 256
    stop: list[str] = Field(default_factory=list)
    weight: Annotated[float, Field(gt=0)] = 1.0

    @property
    def generated_cap(self) -> int:
        """The tokens one problem may generate: an episode's `max_tokens` (every turn), else `max_tokens`."""
        return self.environment.max_tokens if self.environment is not None else self.max_tokens

    @field_validator("reward")
    @classmethod
    def _known_reward(cls, v: str | None) -> str | None:
        from hyper_es import rewards

        if v is not None:
            rewards.get(v)  # raises ValueError naming the registered rewards, or the import problem
        return v

    @model_validator(mode="after")
    def _has_data(self) -> TaskConfig:
        if not (self.train or self.val or self.test):
            raise ValueError("a task needs at least one of train, val, test")
        if (self.reward is None) == (self.environment is None):
            raise ValueError("a task needs a `reward`, or an `environment` whose episodes carry their own reward "
                             "(not both)")
        if self.environment is None and any(isinstance(getattr(self, s), EnvironmentSource)
                                            for s in ("train", "val", "test")):
            raise ValueError("source 'environment' makes episodes: set the task's `environment` (factory: ...)")
        if self.environment is not None and self.prompt.few_shot:
            raise ValueError("prompt.few_shot is for single-turn tasks; an environment's rows carry their own prompt")
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
