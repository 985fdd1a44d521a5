"""A stage in a child process of its own, as `executor.isolate` says; the recipe travels as plain data (its fields
and its file's path), as it does to a Ray task."""

from __future__ import annotations

from pathlib import Path

from hyper_es.distributed.child import isolating, run_in_child
from hyper_es.recipe.load import recipe_from_dict
from hyper_es.recipe.schema import Recipe

NO_FILE = "<recipe>"


def portable(recipe: Recipe) -> tuple[dict, str]:
    """The recipe as plain data for another process: its fields, and its file's path (relative paths resolve there)."""
    return recipe.model_dump(mode="json"), str(recipe._path or NO_FILE)


def call_with_recipe(fn, data: dict, path: str, *args, **kwargs):
    """`fn(recipe, *args, **kwargs)` with the recipe rebuilt from `portable`'s pair."""
    return fn(recipe_from_dict(data, path if path == NO_FILE else Path(path)), *args, **kwargs)


def isolates(recipe: Recipe) -> bool:
    return isolating(recipe.executor.isolate)


def in_own_process(recipe: Recipe, stage: str, fn, *args, **kwargs):
    """`fn(recipe, *args, **kwargs)`: in a child process when the recipe isolates stages (then `fn` is a module-level
    function and its arguments and result pickle), else here."""
    if not isolates(recipe):
        return fn(recipe, *args, **kwargs)
    return run_in_child(stage, call_with_recipe, fn, *portable(recipe), *args, threads=recipe.threads, **kwargs)
