"""Recipe schema: one validated YAML file drives the whole pipeline. `fields` (base model, field types) → `data`
(sources, prompt, task) → `training` (model, gradient jobs, merge), `directions` (existing adapters) → `search`
(search, ES, evaluation, executor, co-evolution), `compare` (`hyper-es compare`) → `schema` (the Recipe) → `load`
(YAML in, one line per error out) → `isolate` (a stage in a child process, the recipe as plain data)."""

from hyper_es.recipe.data import (
    SOURCE_TAGS,
    BuiltinSource,
    EnvironmentConfig,
    EnvironmentSource,
    FileSource,
    HFSource,
    PromptConfig,
    ReasoningGymSource,
    Source,
    TaskConfig,
)
from hyper_es.recipe.compare import CompareConfig
from hyper_es.recipe.directions import AdapterRef, DirectionsConfig
from hyper_es.recipe.fields import Strict
from hyper_es.recipe.load import (
    format_validation_error,
    load_recipe,
    load_run_recipe,
    move_search_fields,
    pin_run_partitions,
    recipe_from_dict,
)
from hyper_es.recipe.schema import Recipe
from hyper_es.recipe.search import (
    CoevolveConfig,
    ESConfig,
    EvalConfig,
    ExecutorConfig,
    FitnessConfig,
    GradFitConfig,
    PromptSpace,
    Resources,
    SearchConfig,
)
from hyper_es.recipe.serve import ServeConfig
from hyper_es.recipe.training import METHODS, GradientConfig, JobOverride, LoraConfig, MergeConfig, ModelConfig

__all__ = [
    "METHODS", "SOURCE_TAGS", "AdapterRef", "BuiltinSource", "CompareConfig", "DirectionsConfig", "CoevolveConfig", "ESConfig", "EnvironmentConfig",
    "EnvironmentSource", "EvalConfig", "ExecutorConfig", "FitnessConfig",
    "FileSource", "GradFitConfig", "GradientConfig", "HFSource", "JobOverride", "LoraConfig", "MergeConfig", "ModelConfig",
    "PromptConfig", "PromptSpace", "ReasoningGymSource", "Recipe", "Resources", "SearchConfig", "ServeConfig", "Source", "Strict",
    "TaskConfig", "format_validation_error", "load_recipe", "load_run_recipe", "move_search_fields", "pin_run_partitions",
    "recipe_from_dict",
]
