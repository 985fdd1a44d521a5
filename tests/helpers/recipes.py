"""The tests' one recipe builder: a tiny recipe as plain data with an overlay laid over it (the toolkit's
`overlay`: a mapping is merged key by key, anything else replaces, a dotted key names a nested field), validated as
a Recipe and, where a test needs the file, written to FOLDER/recipe.yaml.

Two bases: `tiny` (recipes/tiny.yaml) and `dense` (a dense training reward, three targets, the generator's first 64
train items: the golden runs and the gradient-stage tests were written for it)."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

import hyper_es as hx
from hyper_es.compare.grid import overlay

ROOT = Path(__file__).resolve().parents[2]
DENSE = {
    "name": "tiny-dense",
    "model": {"name": "tiny-random", "dtype": "float32", "max_model_len": 512},
    "tasks": [{"name": "chain_sum", "reward": "dense_reward:digit_fraction", "max_tokens": 16,
               "train": {"source": "reasoning_gym", "dataset": "chain_sum", "size": 64, "seed": 1,
                         "partition": "none"},  # the generator's first 64 items, as the tests were written for
               "test": {"source": "builtin", "name": "chain_sum_test", "limit": 16}}],
    "gradient": {"directions": 3, "steps": 3, "batch_size": 4, "num_generations": 2, "max_completion_length": 16,
                 "learning_rate": 0.01, "lora": {"r": 4, "alpha": 8, "targets": ["q_proj", "v_proj", "down_proj"]}},
}
SMALL_SEARCH = {  # on `dense`: 2 directions of 2 steps, 8 val and 8 test rows, a 2-generation search of 4
    "gradient.directions": 2, "gradient.steps": 2, "merge": {"layer_group_size": 2},
    "search": {"popsize": 4, "max_generations": 2, "sigma0": 0.5},
    "fitness": {"minibatch": 4, "val_size": 8, "rescore_top": 1}}
VAL = {"source": "reasoning_gym", "dataset": "chain_sum", "size": 8, "seed": 500000}


def tiny_data(changes: dict | None = None, *, base: str = "tiny") -> dict:
    """The base recipe's data with `changes` laid over it. A change to a task is written `tasks.0.<field>`."""
    data = (hx.load_recipe(ROOT / "recipes" / "tiny.yaml").model_dump(mode="json") if base == "tiny"
            else copy.deepcopy(DENSE))
    tasks = {k: v for k, v in (changes or {}).items() if k.startswith("tasks.")}
    data = overlay(data, {k: v for k, v in (changes or {}).items() if k not in tasks})
    for key, value in tasks.items():
        _, index, rest = key.split(".", 2)
        data["tasks"][int(index)] = overlay(data["tasks"][int(index)], {rest: value})
    return data


def tiny_recipe(folder: Path | None = None, changes: dict | None = None, *, base: str = "tiny",
                write: bool = False) -> hx.Recipe:
    """`tiny_data` as a Recipe whose path is FOLDER/recipe.yaml (relative paths resolve there); `write`: the file is
    written too, and the Recipe read back from it."""
    data = tiny_data(changes, base=base)
    if folder is None:
        return hx.recipe.recipe_from_dict(data)
    path = Path(folder) / "recipe.yaml"
    if write:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return hx.load_recipe(path)
    return hx.recipe.recipe_from_dict(data, path)
