"""The environment contract (issue 45): TRL's `environment_factory` shape, so one class runs under `GRPOTrainer` and
under the search.

An environment is a class whose instances have
- `reset(**row) -> str | None`: start an episode from a dataset row (its fields as keyword arguments); a string is
  appended to the row's prompt, as TRL appends it to the last user message;
- public methods (no leading underscore), each a tool the model may call, with type hints and a docstring (their JSON
  schema is transformers' `get_json_schema`, as TRL renders it);
- optionally `get_reward() -> float`: the episode's reward from the environment's state, asked once it ends.

Tools are found as TRL finds them: the functions of the class, less `reset`, `get_reward` and names starting with
an underscore. A recipe names an environment as `package.module:Class` (as user rewards are named).
"""

from __future__ import annotations

import inspect

from hyper_es.errors import ConfigError
from hyper_es.refs import import_ref

RESERVED = ("reset", "get_reward")


def tool_names(cls: type) -> list[str]:
    """The tool methods of an environment class, in TRL's order (inspect.getmembers: by name)."""
    return [name for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
            if name not in RESERVED and not name.startswith("_")]


def check_environment(cls: object, spec: str) -> type:
    """`cls` if it is an environment class (a zero-argument constructor, `reset`, at least one tool, each tool with
    a docstring and typed parameters, as transformers' schema needs); else one ConfigError naming `spec`."""
    if not inspect.isclass(cls):
        raise ConfigError(f"environment {spec!r}: expected a class, got {type(cls).__name__}")
    if not callable(getattr(cls, "reset", None)):
        raise ConfigError(f"environment {spec!r}: expected a reset(**row) method (TRL's environment contract)")
    tools = tool_names(cls)
    if not tools:
        raise ConfigError(f"environment {spec!r}: expected at least one public method for the model to call as a tool")
    try:
        cls()
    except TypeError as exc:
        raise ConfigError(f"environment {spec!r}: expected a constructor without arguments (TRL calls the factory "
                          f"with none): {exc}") from None
    for name in tools:
        try:
            tool_schema(getattr(cls, name))
        except Exception as exc:  # transformers' DocstringParsingException / TypeHintParsingException
            raise ConfigError(f"environment {spec!r}: tool {name}: {exc}") from None
    return cls


def load_environment(spec: str) -> type:
    """The environment class a recipe names ('package.module:Class', or a shipped one's short name)."""
    from hyper_es.environments.builtin import SHIPPED

    cls = SHIPPED[spec] if spec in SHIPPED else import_ref(spec, "environment")
    return check_environment(cls, spec)


def tool_schema(fn) -> dict:
    """The JSON schema of a tool, as TRL and the chat templates render it (transformers' `get_json_schema`)."""
    from transformers.utils import get_json_schema

    return get_json_schema(fn)


def tools_of(env: object, names: list[str] | None = None) -> dict:
    """{name: bound method} of an environment instance's tools (`names`: its class's `tool_names`, found once)."""
    return {name: getattr(env, name) for name in (names if names is not None else tool_names(type(env)))}
