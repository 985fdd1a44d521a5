"""The recipe: one validated YAML file drives the whole pipeline (tasks → directions → merge → search → eval)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, PrivateAttr, model_validator

from hyper_es.recipe.compare import CompareConfig
from hyper_es.recipe.data import TaskConfig
from hyper_es.recipe.directions import DirectionsConfig
from hyper_es.recipe.fields import PosInt, Strict
from hyper_es.recipe.search import (CoevolveConfig, ESConfig, EvalConfig, ExecutorConfig, FitnessConfig, GradFitConfig,
                                     SearchConfig)
from hyper_es.recipe.serve import ServeConfig
from hyper_es.recipe.training import GradientConfig, MergeConfig, ModelConfig

# search fields that moved to their own sections: a recipe still naming them under search: is told where
MOVED = {**{k: "fitness" for k in FitnessConfig.model_fields},
         **{k: "serve" for k in ("candidates", "merge_device", "prepare_deltas", "delta_dtype", "compile_merge")}}


class Recipe(Strict):
    name: str
    model: ModelConfig
    tasks: list[TaskConfig] = Field(min_length=1)
    gradient: GradientConfig = Field(default_factory=GradientConfig)
    directions: DirectionsConfig | None = Field(
        None, description="search directions that exist already (adapters or a saved set) instead of training them")
    merge: MergeConfig = Field(default_factory=MergeConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    fitness: FitnessConfig = Field(default_factory=FitnessConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)
    es: ESConfig = Field(default_factory=ESConfig)
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    gradfit: GradFitConfig | None = Field(None, description="the gradient-fitted control: the search's genome "
                                          "fitted by GRPO on the same rows (none: not run)")
    coevolve: CoevolveConfig | None = Field(None, description="co-evolve prompts with the parameters (none: fixed)")
    compare: CompareConfig = Field(default_factory=CompareConfig, description="`hyper-es compare`: the baseline's "
                                   "lr grid, the controls and the variants")
    method: Literal["hyper-es", "es"] = Field(
        "hyper-es", description="what `hyper-es run` trains besides the GRPO-LoRA baseline: Hyper-ES (directions + "
        "search), or full-parameter ES (the `es` section)")
    threads: PosInt = Field(1, description="torch intra-op threads (1 when another process shares the cores)")

    _path: Path | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _old_shape(cls, data):
        search = data.get("search") if isinstance(data, dict) else None
        old = [k for k in search if k in MOVED] if isinstance(search, dict) else []
        if old:
            raise ValueError("@search: " + ", ".join(f"{k} moved to {MOVED[k]}.{k}" for k in old) + " (fitness: what "
                             "the search and ES score a candidate on; serve: how an engine serves it)")
        return data

    @model_validator(mode="after")
    def _cross_refs(self) -> Recipe:
        if self.method == "es" and self.es.start == "hyper-es":
            raise ValueError("@es.start: hyper-es needs method: hyper-es (a method: es run has no search); "
                             "expected base or baseline")
        names = [t.name for t in self.tasks]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"@tasks: task names must be unique; repeated: {', '.join(dup)}")
        for stage, split in (("gradient", "train"), ("fitness", "val")):
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
            self._check_genes(ref, names)
        if self.method == "hyper-es" and self.search.recommend == "best_val" and not self.fitness.rescore_top:
            raise ValueError("@fitness.rescore_top: 0 re-scores nothing on validation, and search.recommend: best_val "
                             "returns the best re-scored candidate; expected rescore_top >= 1, or recommend: mean")
        if self.coevolve and self.search.recommend == "mean":
            raise ValueError("@search.recommend: mean is CMA-ES's mean of the coefficients, but co-evolution picks "
                             "a prompt with them by validation; expected best_val")
        played = [n for n in self.searched_task_names() if self.task(n).environment is not None]
        if self.fitness.reward and played:
            raise ValueError(f"@fitness.reward: tasks {', '.join(played)} play an environment, whose episodes "
                             f"carry its reward; expected no fitness.reward, or single-turn tasks only")
        if self.gradient.rewards and any(self.task(n).environment is not None for n in self.training_task_names()):
            raise ValueError("@gradient.rewards: an environment task's GRPO job is rewarded by its episodes; expected "
                             "no gradient.rewards with environment tasks")
        if self.fitness.race and (self.method == "es" or self.coevolve):
            raise ValueError("@fitness.race: racing ranks CMA-ES's candidates for its parents; ES weights every member "
                             "and co-evolution pairs prompts with them; expected method: hyper-es without coevolve")
        if self.eval.merges and (self.method == "es" or not self.search.scale_scan):
            raise ValueError("@eval.merges: a merge-<method> row scales the directions' merge by a lambda chosen from "
                             "search.scale_scan; expected method: hyper-es with a scale_scan")
        if self.gradfit and (self.method == "es" or self.merge.per_direction_density or self.merge.per_layer_density):
            raise ValueError("@gradfit: it fits the merge coefficients of method: hyper-es by gradient, and a "
                             "density gene has none; expected method: hyper-es without per_direction_density or "
                             "per_layer_density")
        t = self.compare.transfer
        if t is not None and (t not in names or self.task(t).test is None or t in self.training_task_names()
                              or t in (self.fitness.tasks or [])):
            raise ValueError(f"@compare.transfer: '{t}' is not a task with a test split that no stage trains or "
                             f"searches on")
        if self.directions and self.method == "es":
            raise ValueError("@directions: method: es searches no directions; expected method: hyper-es")
        if self.directions and self.gradient.directions_from == "snapshots":
            raise ValueError("@directions: the directions are given, so gradient.directions_from: snapshots makes "
                             "none; expected directions_from: jobs")
        g, trained = self.gradient, self.training_task_names()
        if self.compare.further and not (self.directions and self.directions.adapters and self.compare.equal):
            raise ValueError("@compare.further: the best given adapter trained on with grpo-equal-compute's budget; "
                             "expected directions.adapters and compare.equal")
        if g.baseline_start is not None:
            given = ([self.directions.ref(i)[1] for i in range(len(self.directions.adapters))]
                     if self.directions and self.directions.adapters else [])
            if g.baseline_start not in given:
                raise ValueError(f"@gradient.baseline_start: '{g.baseline_start}' is not one of directions.adapters "
                                 f"({', '.join(given) or 'none given'}); expected an adapter's name")
        if "task" in g.vary and trained and g.directions % len(trained):
            raise ValueError(f"@gradient.directions: vary: task gives each of the {len(trained)} training tasks the "
                             f"same number of jobs; expected a multiple of {len(trained)}, got {g.directions}")
        return self

    @model_validator(mode="after")
    def _training_mix(self) -> Recipe:
        """The GRPO-LoRA baseline trains on every training task at once (`hyper-es run` trains it unless the
        directions are given without `baseline: true`; `hyper-es compare` always): refused where it cannot."""
        if (self.directions is None or self.directions.baseline) and (why := self.mixed_training()):
            raise ValueError(f"@gradient.tasks: {why}")
        return self

    def mixed_training(self) -> str | None:
        """Why a GRPO job on every training task at once cannot run (TRL's trainer takes one environment and one set
        of episode limits, not beside single-turn tasks), or None."""
        trained = self.training_task_names()
        envs = {env.model_dump_json() if (env := self.task(n).environment) else None for n in trained}
        if len(envs) < 2:
            return None
        return (f"a GRPO job trains on one environment section or on single-turn tasks, not both: the training tasks "
                f"are {', '.join(trained)}; expected gradient.tasks of one kind (the GRPO-LoRA baseline trains on "
                f"them all)")

    def _check_genes(self, ref: str, names: list[str]) -> None:
        """A co-evolved task's prompt genes: a known task, and genes that apply to it."""
        if ref not in names:
            raise ValueError(f"@coevolve.tasks.{ref}: unknown task; expected one of: {', '.join(names)}")
        space, env = self.coevolve.tasks[ref], self.task(ref).environment
        if env is not None and (space.templates or space.formats or space.max_shots or space.propose):
            raise ValueError(f"@coevolve.tasks.{ref}: task '{ref}' plays an environment, whose episodes open with "
                             f"its rows' own prompts: only `systems` and `tools` evolve there; expected templates, "
                             f"formats and propose empty and max_shots: 0")
        if space.tools and env is None:
            raise ValueError(f"@coevolve.tasks.{ref}.tools: task '{ref}' calls no tools (it has no environment); "
                             f"expected tools only on an environment task")
        if space.tools:
            from hyper_es.environments import load_environment, tool_names

            own = tool_names(load_environment(env.factory))
            for i, alt in enumerate(space.tools):
                if set(alt) - set(own):
                    raise ValueError(f"@coevolve.tasks.{ref}.tools[{i}]: {', '.join(sorted(set(alt) - set(own)))} "
                                     f"is not a tool of {env.factory}; expected some of: {', '.join(own)}")
        if self.task(ref).train is None and space.max_shots:
            raise ValueError(f"@coevolve.tasks.{ref}.max_shots: few-shot examples come from the train split, "
                             f"but task '{ref}' has none; expected 0")

    def searched_task_names(self) -> list[str]:
        """The search's and ES's tasks: `fitness.tasks`, else every task with a val split."""
        return self.fitness.tasks or [t.name for t in self.tasks if t.val is not None]

    def training_task_names(self) -> list[str]:
        """The gradient stage's tasks: `gradient.tasks`, else every task with a train split."""
        return self.gradient.tasks or [t.name for t in self.tasks if t.train is not None]

    def completion_cap(self) -> int:
        """The most tokens a GRPO job's completion holds: an environment task's episode (`max_tokens`, TRL's
        `max_completion_length` there), else `gradient.max_completion_length`."""
        played = [self.task(n).environment.max_tokens for n in self.training_task_names()
                  if self.task(n).environment is not None]
        return max(played, default=self.gradient.max_completion_length)

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
