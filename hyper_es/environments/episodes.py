"""Multi-turn episodes on an engine (issue 45): each turn, every running episode's conversation is rendered with the
chat template and its tools, and all of them are generated in one engine call; the tool calls in each completion are
parsed and run; an episode ends when a completion calls no tool, at a limit, or at a bad call.

Limits per episode: `max_turns` completions, `max_tokens` generated tokens in all (each turn's completion is capped by
what is left, and by `turn_tokens`), `wall_s` seconds since the episodes began. A bad call (see calls.py) ends the
episode with reward 0. The reward is the environment's `get_reward()` once the episode ends (0 without one).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from hyper_es.environments.calls import BadCall, parse_calls, run_call
from hyper_es.environments.contract import tool_names, tool_schema, tools_of
from hyper_es.sampling import Sampling


@dataclass
class Limits:
    max_turns: int = 4
    max_tokens: int = 512
    turn_tokens: int = 128
    wall_s: float = 600.0


@dataclass
class Episode:
    row_id: str
    messages: list[dict]
    env: object = field(repr=False)
    turns: int = 0
    tool_calls: int = 0
    tokens: int = 0
    reward: float = 0.0
    end: str | None = None  # answered, max_turns, max_tokens, wall_s, bad_call: ...

    def record(self) -> dict:
        return {"id": self.row_id, "turns": self.turns, "tool_calls": self.tool_calls, "tokens": self.tokens,
                "reward": self.reward, "end": self.end}


def chat_template(tok) -> str | None:
    """The tokenizer's own template where it renders tool calls, else TRL's Qwen2.5 template (ChatML, the
    documented fallback); None keeps the tokenizer's."""
    from trl.chat_template_utils import qwen2_5_chat_template, supports_tool_calling

    return None if supports_tool_calling(tok) else qwen2_5_chat_template


def start(env_cls: type, rows: list[dict]) -> list[Episode]:
    """One episode per row: a fresh environment reset with the row's fields, the row's prompt as the user message
    (with what `reset` returns appended, as TRL appends it)."""
    episodes = []
    for row in rows:
        env = env_cls()
        fields = {k: v for k, v in row.items() if k != "id"}
        observation = env.reset(**fields)
        content = row["prompt"] + (observation if isinstance(observation, str) else "")
        episodes.append(Episode(str(row["id"]), [{"role": "user", "content": content}], env))
    return episodes


def run_episodes(engine, tok, env_cls: type, rows: list[dict], limits: Limits = Limits(), *,
                 sampling: Sampling = Sampling(), template: str | None = None) -> list[Episode]:
    """Play every row's episode to its end on `engine` (a generator or resident engine: `generate_groups`).
    `template`: a chat template (default: the tokenizer's own where it renders tool calls, else the fallback)."""
    episodes, t0 = start(env_cls, rows), time.monotonic()
    template = template or chat_template(tok)
    names = tool_names(env_cls)  # found once: each turn binds them to its episode's environment
    schemas = [tool_schema(getattr(env_cls, n)) for n in names]
    while running := [e for e in episodes if e.end is None]:
        if time.monotonic() - t0 > limits.wall_s:
            for e in running:
                _finish(e, "wall_s")
            break
        caps: dict[int, list[Episode]] = {}  # one group per token cap left: a turn is one engine call
        for e in running:
            caps.setdefault(min(limits.turn_tokens, limits.max_tokens - e.tokens), []).append(e)
        groups = [([tok.apply_chat_template(e.messages, tools=schemas, add_generation_prompt=True, tokenize=True,
                                            chat_template=template, return_dict=False) for e in group],
                   _capped(sampling, cap)) for cap, group in caps.items()]
        for group, outs in zip(caps.values(), engine.generate_groups(groups), strict=True):
            for e, completions in zip(group, outs, strict=True):
                _turn(e, tok.decode(completions[0], skip_special_tokens=True), len(completions[0]), limits, names)
    return episodes


def _capped(s: Sampling, budget: int) -> Sampling:
    return Sampling(n=1, temperature=s.temperature, top_p=s.top_p, max_tokens=max(1, budget), seed=s.seed, stop=s.stop)


def _turn(e: Episode, text: str, tokens: int, limits: Limits, names: list[str]) -> None:
    e.turns, e.tokens = e.turns + 1, e.tokens + tokens
    e.messages.append({"role": "assistant", "content": text})
    try:
        calls = parse_calls(text)
        tools = tools_of(e.env, names)
        for call in calls:
            e.tool_calls += 1
            e.messages.append({"role": "tool", "name": call.name, "content": run_call(tools, call)})
    except BadCall as exc:
        e.end, e.reward = f"bad_call: {exc}", 0.0
        return
    if not calls:
        _finish(e, "answered")
    elif e.turns >= limits.max_turns:
        _finish(e, "max_turns")
    elif e.tokens >= limits.max_tokens:
        _finish(e, "max_tokens")


def _finish(e: Episode, why: str) -> None:
    get_reward = getattr(e.env, "get_reward", None)
    try:
        e.end, e.reward = why, float(get_reward()) if callable(get_reward) else 0.0
    except Exception as exc:  # the environment's own failure: reward 0, counted by its end
        e.end, e.reward = f"reward_error: {type(exc).__name__}: {exc}", 0.0
