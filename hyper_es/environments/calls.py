"""Tool calls in a completion, and a tool run on them: the episode's one contact with model output, which is parsed
as JSON and never executed.

The format is the one of Qwen2.5's and Hermes' chat templates (TRL ships it as `qwen2_5_chat_template`), the fallback
for a tokenizer whose own template renders no tool calls (SmolLM2's, the tiny test model's):

    <tool_call>
    {"name": "multiply", "arguments": {"a": 4821, "b": 37}}
    </tool_call>
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
MAX_CALL_CHARS = 4096  # a call's JSON longer than this is refused unread (a 5 MB argument ends the episode)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict


class BadCall(ValueError):
    """A completion's tool call that cannot be run: the episode ends with reward 0 (counted)."""


def parse_calls(text: str, *, max_chars: int = MAX_CALL_CHARS) -> list[ToolCall]:
    """Every `<tool_call>` block of `text`, in order ([] when there is none). BadCall for a block that is too long,
    not JSON, or not {"name": str, "arguments": object}."""
    calls = []
    for body in CALL.findall(text):
        if len(body) > max_chars:
            raise BadCall(f"a tool call of {len(body)} characters (at most {max_chars})")
        try:
            data = json.loads(body)
        except json.JSONDecodeError as exc:
            raise BadCall(f"a tool call that is not JSON ({exc.msg})") from None
        if not (isinstance(data, dict) and isinstance(data.get("name"), str)
                and isinstance(data.get("arguments", {}), dict)):
            raise BadCall('a tool call that is not {"name": ..., "arguments": {...}}')
        calls.append(ToolCall(data["name"], data.get("arguments", {})))
    return calls


def run_call(tools: dict, call: ToolCall) -> str:
    """The tool's result as the tool message's text. BadCall for an unknown tool, arguments the tool does not take,
    or a tool that raises (its message kept)."""
    fn = tools.get(call.name)
    if fn is None:
        raise BadCall(f"unknown tool {call.name!r} (tools: {', '.join(sorted(tools))})")
    try:
        return str(fn(**call.arguments))
    except Exception as exc:  # a tool's own failure, or arguments it does not take: the episode ends
        raise BadCall(f"tool {call.name} raised {type(exc).__name__}: {exc}") from None
