"""Multi-turn episodes on an engine (issue 45): each turn, every running episode's conversation is rendered with the
chat template and its tools, and all of them are generated in one engine call; the tool calls in each completion are
parsed and run; an episode ends when a completion calls no tool, at a limit, or at a bad call. Several players (the
candidates of a generation, each with its own episodes) share each turn's call (`play`).

Limits per episode: `max_turns` completions, `max_tokens` generated tokens in all (each turn's completion is capped by
what is left, and by `turn_tokens`), `wall_s` seconds since the episodes began, and the engine's context: an episode
whose conversation leaves no room for its next completion in `max_len` tokens ends there (`context`). A bad call (see calls.py) ends the
episode with reward 0. The reward is the environment's `get_reward()` once the episode ends (0 without one).
"""

from __future__ import annotations

import functools
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


@functools.lru_cache(maxsize=8)
def chat_template(tok) -> str | None:
    """The tokenizer's own template where it renders tool calls, else TRL's Qwen2.5 template (ChatML, the
    documented fallback); None keeps the tokenizer's. Found once per tokenizer (TRL's check renders a whole
    tool-calling exchange), not once per candidate."""
    from trl.chat_template_utils import qwen2_5_chat_template, supports_tool_calling

    return None if supports_tool_calling(tok) else qwen2_5_chat_template


@functools.lru_cache(maxsize=32)
def schemas_of(env_cls: type) -> tuple[dict, ...]:
    """The JSON schemas of an environment class's tools, in `tool_names` order (found once per class)."""
    return tuple(tool_schema(getattr(env_cls, n)) for n in tool_names(env_cls))


def described(env_cls: type, texts: dict[str, str] | None = None) -> list[dict]:
    """The class's tool schemas with the descriptions `texts` gives (tool name -> description; a co-evolved gene),
    made once per class and texts (a candidate's scoring asks for them every time)."""
    return list(_described(env_cls, tuple(sorted((texts or {}).items()))))


@functools.lru_cache(maxsize=256)
def _described(env_cls: type, texts: tuple[tuple[str, str], ...]) -> tuple[dict, ...]:
    out, given = list(schemas_of(env_cls)), dict(texts)
    for i, schema in enumerate(out):
        fn = schema.get("function", schema)
        if fn["name"] in given:
            fn = {**fn, "description": given[fn["name"]]}
            out[i] = {**schema, "function": fn} if "function" in schema else fn
    return tuple(out)


def as_messages(prompt: str | list[dict]) -> list[dict]:
    """A row's prompt as chat messages: a string is the user message; a list of messages is a conversational
    prompt, as TRL takes it (copied)."""
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]


def opening(row: dict, observation=None) -> list[dict]:
    """An episode's first messages: the row's prompt, with what `reset` returned appended to the last message."""
    messages = as_messages(row["prompt"])
    if isinstance(observation, str):
        messages[-1]["content"] += observation  # on the last message, as TRL does
    return messages


def start(env_cls: type, rows: list[dict]) -> list[Episode]:
    """One episode per row: a fresh environment reset with the row's fields, then its opening messages."""
    episodes = []
    for row in rows:
        env = env_cls()
        observation = env.reset(**row)  # the whole row, as TRL passes it
        episodes.append(Episode(str(row["id"]), opening(row, observation), env))
    return episodes


def run_episodes(engine, tok, env_cls: type, rows: list[dict], limits: Limits = Limits(), *,
                 sampling: Sampling = Sampling(), template: str | None = None) -> list[Episode]:
    """Play every row's episode to its end on `engine` (a generator or resident engine: `generate_groups`).
    `template`: a chat template (default: the tokenizer's own where it renders tool calls, else the fallback)."""
    return play(lambda asks: [engine.generate_groups(asks[0])], tok, env_cls, [rows], limits, sampling=sampling,
                template=template, max_len=getattr(engine, "max_model_len", None))[0]


def play(generate, tok, env_cls: type, rows: list[list[dict]], limits: Limits = Limits(), *,
         sampling: Sampling = Sampling(), template: str | None = None, max_len: int | None = None,
         schemas: list[list[dict]] | None = None) -> list[list[Episode]]:
    """Episodes of several players (`rows[p]`: player p's rows), every turn in one call `generate(asks)`: `asks[p]`
    is player p's prompt groups (`generate_groups`' argument; [] once its episodes have ended) and the result is
    each player's outputs. An engine with LoRA candidates passes `asks` to `generate_candidates`. With `sampling.n`
    above 1, each row is played n times (its episodes next to each other). `schemas[p]`: the tools as player p
    sees them (default: the class's own, `described`)."""
    players, t0 = [start(env_cls, [r for r in rs for _ in range(sampling.n)]) for rs in rows], time.monotonic()
    template = template or chat_template(tok)
    names = tool_names(env_cls)  # found once: each turn binds them to its episode's environment
    schemas = schemas or [described(env_cls)] * len(players)
    seen = {id(e): schemas[p] for p, eps in enumerate(players) for e in eps}
    while any(e.end is None for eps in players for e in eps):
        if time.monotonic() - t0 > limits.wall_s:
            for e in (e for eps in players for e in eps if e.end is None):
                _finish(e, "wall_s")
            break
        prompts = {id(e): tok.apply_chat_template(e.messages, tools=seen[id(e)], add_generation_prompt=True,
                                                  tokenize=True, chat_template=template, return_dict=False)
                   for eps in players for e in eps if e.end is None}
        for e in (e for eps in players for e in eps if e.end is None):
            if max_len is not None and len(prompts[id(e)]) + min(limits.turn_tokens, limits.max_tokens - e.tokens) > max_len:
                _finish(e, "context")  # the conversation leaves no room for the next completion
        caps = [_by_cap([e for e in eps if e.end is None], limits) for eps in players]
        asks = [[([prompts[id(e)] for e in group], _capped(sampling, cap)) for cap, group in by.items()]
                for by in caps]
        for by, outs in zip(caps, generate(asks), strict=True):
            for group, group_outs in zip(by.values(), outs, strict=True):
                for e, completions in zip(group, group_outs, strict=True):
                    _turn(e, tok.decode(completions[0], skip_special_tokens=True), len(completions[0]), limits, names)
    return players


def _by_cap(running: list[Episode], limits: Limits) -> dict[int, list[Episode]]:
    """Running episodes grouped by the tokens their next completion may have: one prompt group each."""
    caps: dict[int, list[Episode]] = {}
    for e in running:
        caps.setdefault(min(limits.turn_tokens, limits.max_tokens - e.tokens), []).append(e)
    return caps


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


def summary(episodes: list[Episode]) -> dict:
    """Counts over episodes: how many, turns, tool calls, tokens, and how they ended (by kind: answered, max_turns,
    max_tokens, wall_s, bad_call, reward_error)."""
    ends: dict[str, int] = {}
    for e in episodes:
        kind = (e.end or "running").split(":")[0]
        ends[kind] = ends.get(kind, 0) + 1
    return {"episodes": len(episodes), "turns": sum(e.turns for e in episodes),
            "tool_calls": sum(e.tool_calls for e in episodes), "tokens": sum(e.tokens for e in episodes),
            "ends": dict(sorted(ends.items()))}


def combined(counts: list[dict]) -> dict:
    """Several `summary` dicts added up (a generation's candidates, a race's rungs)."""
    out: dict = {"episodes": 0, "turns": 0, "tool_calls": 0, "tokens": 0, "ends": {}}
    for c in counts:
        for key in ("episodes", "turns", "tool_calls", "tokens"):
            out[key] += c[key]
        for kind, n in c["ends"].items():
            out["ends"][kind] = out["ends"].get(kind, 0) + n
    out["ends"] = dict(sorted(out["ends"].items()))
    return out


def combined_by_task(per_score: list[dict]) -> dict:
    """{task: combined counts} over several Scores' `episodes` ({task: summary})."""
    return {t: combined([e[t] for e in per_score if t in e]) for t in sorted({t for e in per_score for t in e})}
