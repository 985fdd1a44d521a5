"""Issue 45's foundation: the environment contract (TRL's `environment_factory` shape), tool calls parsed from a
completion and run with limits, and the two shipped environments; a shipped class runs unchanged under TRL's
GRPOTrainer."""

from __future__ import annotations

import pytest

from hyper_es.environments import (BadCall, ToolCall, load_environment, parse_calls, rows, run_call, tool_names,
                                   tools_of)
from hyper_es.environments.builtin import Calculator, GuessNumber
from hyper_es.errors import ConfigError


def test_tool_calls_are_parsed_as_json_and_bad_ones_end_the_episode():
    text = ('I will multiply.\n<tool_call>\n{"name": "multiply", "arguments": {"a": 12, "b": 3}}\n</tool_call>'
            '<tool_call>{"name": "submit", "arguments": {"answer": 36}}</tool_call>')
    assert parse_calls(text) == [ToolCall("multiply", {"a": 12, "b": 3}), ToolCall("submit", {"answer": 36})]
    assert parse_calls("The answer is \\boxed{36}.") == []
    for bad, why in (("<tool_call>{not json}</tool_call>", "not JSON"),
                     ('<tool_call>["multiply"]</tool_call>', "not {"),
                     ('<tool_call>{"name": "add", "arguments": {"a": "' + "9" * 5_000_000 + '"}}</tool_call>',
                      "5000039 characters")):
        with pytest.raises(BadCall, match=why):
            parse_calls(bad)


def test_a_tool_that_is_unknown_misused_or_raises_is_one_bad_call():
    env = Calculator()
    env.reset(target=7)
    tools = tools_of(env)
    assert run_call(tools, ToolCall("add", {"a": 3, "b": 4})) == "7"
    for call, why in ((ToolCall("divide", {"a": 1, "b": 2}), "unknown tool 'divide'"),
                      (ToolCall("add", {"a": 1}), "tool add raised TypeError"),
                      (ToolCall("add", {"a": "x", "b": 1}), "tool add raised TypeError")):
        with pytest.raises(BadCall, match=why):
            run_call(tools, call)


@pytest.mark.parametrize("horizon", [1, 2, 4])
def test_the_calculator_is_solved_by_doing_each_operation_with_its_tools(horizon):
    import re

    from hyper_es.environments.builtin import WORDS

    for row in rows("calculator", 5, 0, horizon):
        assert [m["role"] for m in row["prompt"]] == ["user", "assistant", "user"]  # the demonstration, then the row
        env = Calculator()
        env.reset(**row)
        text = row["prompt"][-1]["content"]
        value = float(re.match(r"Take (\d+),", text).group(1))
        said = {w: op for op, w in WORDS.items()}
        for words, b in re.findall(r"(increased by|decreased by|multiplied by) (\d+)", text):
            assert env.get_reward() == 0.0  # not done yet
            value = float(run_call(tools_of(env), ToolCall(said[words], {"a": value, "b": float(b)})))
        assert env.calls == horizon and env.get_reward() == 1.0
        run_call(tools_of(env), ToolCall("add", {"a": value, "b": 1}))  # the last result is what counts
        assert env.get_reward() == 0.0
    assert rows("calculator", 1, 0, 1, demo=False)[0]["prompt"] == rows("calculator", 1, 0, 1)[0]["prompt"][-1:]


@pytest.mark.parametrize("horizon", [1, 2, 4])
def test_guessing_ends_when_found_or_out_of_guesses(horizon):
    for row in rows("guess", 8, 1, horizon):
        assert 1 <= row["secret"] <= 2 ** horizon and row["horizon"] == horizon
        env = GuessNumber()
        env.reset(**row)
        lo, hi = 1, 2 ** horizon
        for _ in range(horizon):  # binary search: finds it unless it needs one guess more than the horizon
            mid = (lo + hi) // 2
            answer = env.guess(mid)
            if answer == "correct":
                break
            lo, hi = (mid + 1, hi) if answer == "higher" else (lo, mid - 1)
        assert env.get_reward() == float(env.solved)
        assert env.guess(row["secret"]) == "no guesses left" or env.solved is False
        env.reset(**row)
        assert env.guess(row["secret"]) == "correct" and env.get_reward() == 1.0


class NoReset:
    def act(self, x: int) -> int:
        """Act.

        Args:
            x: A number.
        """
        return x


class Undocumented:
    def reset(self, **row):
        return None

    def act(self, x):
        return x


def test_an_environment_is_named_like_a_reward_and_checked_once():
    assert load_environment("calculator") is Calculator and tool_names(Calculator) == ["add", "multiply", "subtract"]
    assert load_environment("hyper_es.environments.builtin:GuessNumber") is GuessNumber
    for spec, why in (("test_environments:NoReset", "expected a reset"),
                      ("test_environments:Undocumented", "tool act:"),
                      ("test_environments:Missing", "could not be imported"),
                      ("calculator_typo", "expected 'package.module:name'")):
        with pytest.raises(ConfigError, match=why):
            load_environment(spec)


def test_a_shipped_environment_runs_unchanged_under_trl(tmp_path, monkeypatch):
    """TRL's GRPOTrainer takes the class as its environment_factory (one step, the tiny model): it finds the same
    tools and scores rollouts with get_reward. The tiny model's chat template renders no tool calls, so the
    tokenizer gets TRL's Qwen2.5 template, the documented fallback."""
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen2_5_chat_template

    from hyper_es import models

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    path = models.resolve("tiny-random")
    tok = AutoTokenizer.from_pretrained(path)
    tok.chat_template = qwen2_5_chat_template
    data = rows("guess", 4, 0, 2)  # the rows the search plays are TRL's dataset rows (a conversational prompt)
    cfg = GRPOConfig(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=4, num_generations=2,
                     max_completion_length=8, use_cpu=True, report_to=[], max_tool_calling_iterations=2, save_strategy="no")
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(path), processing_class=tok, reward_funcs=None,
                          args=cfg, train_dataset=datasets.Dataset.from_list(data), environment_factory=GuessNumber)
    assert [t.__name__ for t in trainer.tools] == tool_names(GuessNumber)
    trainer.train()
    assert "rewards/GuessNumber/mean" in trainer.state.log_history[0]


class Scripted:
    """An engine at the unit level: each completion is `script(prompt text)`, tokenised (cut at the turn's cap)."""

    def __init__(self, tok, script):
        self.tok, self.script, self.calls = tok, script, 0

    def generate_groups(self, groups):
        self.calls += 1
        return [[[self.tok.encode(self.script(self.tok.decode(p))[: 16 * s.max_tokens],  # ≥ 1 character a token
                                  add_special_tokens=False)[: s.max_tokens]] for p in prompts] for prompts, s in groups]


def _call(name: str, **arguments) -> str:
    import json

    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


@pytest.fixture(scope="module")
def tiny_tok():
    from transformers import AutoTokenizer

    from hyper_es import models

    return AutoTokenizer.from_pretrained(models.resolve("tiny-random"))


def test_episodes_end_answered_at_their_limits_or_at_a_bad_call(tiny_tok):
    """Several episodes batched per turn: solved by tool calls then an answer; a model that never stops calling
    tools ends at max_turns; a tool that raises, and a 5 MB argument, end with reward 0 (the argument cut at the
    turn's cap; a call past 4,096 characters within the caps refused unread); an episode that reaches its
    token budget ends there, and a completion is cut at the turn's cap."""
    from hyper_es.environments import Limits, run_episodes

    pad = " x" * 60  # > 60 tokens of the tiny tokenizer
    n_pad = len(tiny_tok.encode(pad, add_special_tokens=False))

    def script(prompt: str) -> str:
        done = prompt.count("<tool_response>")
        if "Compute (1200" in prompt:
            return [_call("multiply", a=1200, b=3), _call("add", a=3600, b=-1), "The answer is 3599."][done]
        if "loop" in prompt:
            return _call("add", a=1, b=1)
        if "raise" in prompt:
            return _call("add", a=1)
        if "huge" in prompt:
            return _call("add", a="9" * 5_000_000, b=1)
        if "big" in prompt:
            return _call("add", a="9" * 50_000, b=1)
        if "long" in prompt:
            return _call("add", a=1, b=1) + pad  # a call, then text: the cap cuts the text
        return pad * 3
    rows = [{"id": "c", "prompt": "Compute (1200 * 3 - 1).", "target": 3599}] + [
        {"id": k, "prompt": k, "target": 1} for k in ("loop", "raise", "huge", "long", "talk")]
    engine = Scripted(tiny_tok, script)
    limits = Limits(max_turns=3, max_tokens=2 * n_pad, turn_tokens=n_pad)
    eps = {e.row_id: e for e in run_episodes(engine, tiny_tok, Calculator, rows, limits)}
    assert {k: v for k, v in eps["c"].record().items() if k != "tokens"} == {
        "id": "c", "turns": 3, "tool_calls": 2, "reward": 1.0, "end": "answered"}
    assert eps["loop"].end == "max_turns" and eps["loop"].turns == 3 and eps["loop"].tool_calls == 3
    assert eps["raise"].end.startswith("bad_call: tool add raised TypeError") and eps["raise"].reward == 0.0
    assert eps["huge"].end == "answered" and eps["huge"].tokens == n_pad  # cut at the cap: never a 5 MB call
    big = {"id": "big", "prompt": "big", "target": 1}  # a call past MAX_CALL_CHARS within the caps: refused unread
    huge = run_episodes(Scripted(tiny_tok, script), tiny_tok, Calculator, [big],
                        Limits(max_turns=3, max_tokens=10**6, turn_tokens=10**6))[0]
    assert huge.end.startswith("bad_call: a tool call of") and huge.turns == 1 and huge.reward == 0.0
    assert eps["long"].end == "max_tokens" and eps["long"].tokens == 2 * n_pad and eps["long"].turns == 2
    assert eps["talk"].end == "answered" and eps["talk"].tokens == n_pad  # cut at the turn's cap, no tool call
    assert all(e.reward == 0.0 for k, e in eps.items() if k != "c")


def test_batched_episodes_give_the_rewards_of_episodes_one_by_one(tiny_tok):
    """On the tiny model (HF, greedy), the guess environment's episodes batched per turn and one at a time."""
    from hyper_es import models
    from hyper_es.engine.hf import HFGenerator
    from hyper_es.environments import Limits, run_episodes
    from hyper_es.environments.episodes import chat_template

    model, tok = models.load("tiny-random")
    engine, limits = HFGenerator(model, tok, batch_size=8), Limits(max_turns=2, max_tokens=16, turn_tokens=8)
    template = chat_template(tok)
    assert template is not None  # the tiny model's own template renders no tool calls: the fallback
    episodes = rows("guess", 4, 0, 2)
    batched = [e.record() for e in run_episodes(engine, tok, GuessNumber, episodes, limits, template=template)]
    alone = [run_episodes(engine, tok, GuessNumber, [r], limits, template=template)[0].record() for r in episodes]
    assert batched == alone and all(r["turns"] >= 1 for r in batched)


def test_an_episode_that_outgrows_the_context_ends_there(tiny_tok):
    """A conversation that leaves no room for its next completion in the engine's max_model_len ends (`context`),
    with the environment's reward, instead of failing the engine call."""
    from hyper_es.environments import Limits, run_episodes

    engine = Scripted(tiny_tok, lambda prompt: _call("add", a=1, b=2) + " and more words" * 20)
    row = {"id": "r", "prompt": "Add.", "target": 3}
    first = len(tiny_tok.apply_chat_template([{"role": "user", "content": "Add."}], add_generation_prompt=True,
                                             tokenize=True, return_dict=False))
    engine.max_model_len = 100_000
    free = run_episodes(engine, tiny_tok, Calculator, [row], Limits(max_turns=3, max_tokens=900, turn_tokens=300))[0]
    assert free.end == "max_turns" and free.turns == 3
    engine.max_model_len = first + 2000  # room for about one turn with the tools' schemas
    cut = run_episodes(engine, tiny_tok, Calculator, [row], Limits(max_turns=3, max_tokens=900, turn_tokens=300))[0]
    assert cut.end == "context" and 1 <= cut.turns < 3 and cut.reward == 1.0  # the sum was done
