"""Reading a recipe YAML, with one clear line per error: file, field path, expectation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from hyper_es.errors import RecipeError
from hyper_es.recipe.data import SOURCE_TAGS, BuiltinSource, FileSource, HFSource, ReasoningGymSource
from hyper_es.recipe.schema import MOVED, Recipe
from hyper_es.rundir import RECIPE_FILE


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


def move_search_fields(data: Any) -> Any:
    """A run folder's recipe.yaml written before `fitness:` existed: the fields that moved from `search:` to `fitness:`
    and `serve:` are moved (a recipe given to a command is refused instead, naming the move)."""
    search = data.get("search") if isinstance(data, dict) else None
    for key in [k for k in search if k in MOVED] if isinstance(search, dict) else []:
        data.setdefault(MOVED[key], {})[key] = search.pop(key)
    return data


def load_run_recipe(run_dir: str | Path) -> Recipe:
    """RUN/recipe.yaml, as the run was made (old generated splits keep their partition: none; fields that moved
    from search: are moved)."""
    path = Path(run_dir) / RECIPE_FILE
    return recipe_from_dict(move_search_fields(pin_run_partitions(_read_yaml(path))), path)


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
