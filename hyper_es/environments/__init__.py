"""Multi-turn environments in TRL's `environment_factory` shape (issue 45): the contract, the tool calls parsed from
completions, two shipped environments, and episodes played on an engine, batched per turn (and across the
candidates that share a turn: `play`). A task with an `environment` is scored on episodes by the fitness layer and
the evaluation."""

from hyper_es.environments.builtin import SHIPPED, rows
from hyper_es.environments.calls import BadCall, ToolCall, parse_calls, run_call
from hyper_es.environments.episodes import Episode, Limits, combined_by_task, play, run_episodes, summary
from hyper_es.environments.contract import check_environment, load_environment, tool_names, tool_schema, tools_of

__all__ = ["SHIPPED", "BadCall", "Episode", "Limits", "ToolCall", "combined_by_task", "play", "run_episodes", "summary", "check_environment", "load_environment", "parse_calls", "rows",
           "run_call", "tool_names", "tool_schema", "tools_of"]
