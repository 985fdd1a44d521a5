"""Two shipped environments (issue 45), each with a horizon knob carried by its rows: one where the tools carry the
work (`calculator`: a chain of `horizon` operations on 3-4 digit numbers, said in words, each done by a tool on the
last result) and one where the environment's answers carry the information (`guess`: a hidden integer from 1 to
2**horizon, found with `horizon` guesses answered higher, lower or correct). Rows come from `rows(name, n, seed,
horizon)`; an episode's reward is 1 when it ends solved, else 0.

Calibration (bench/env_calibrate.py): SmolLM2-135M-Instruct wrote no tool call from the prompt alone, so each row's
prompt is a conversation that opens with one demonstration of a first move on another instance (the same for every
row), as a user of TRL would write a conversational prompt."""

from __future__ import annotations

import json
import random


class Calculator:
    """Arithmetic through a calculator: every operation is a tool call; solved when the last result is the value."""

    def __init__(self):
        self.target, self.last, self.calls = None, None, 0

    def reset(self, target: float | None = None, **row) -> None:
        self.target, self.last, self.calls = target, None, 0

    def _done(self, value: float) -> float:
        self.calls, self.last = self.calls + 1, value
        return value

    def add(self, a: float, b: float) -> float:
        """Add two numbers.

        Args:
            a: The first number.
            b: The second number.
        """
        return self._done(a + b)

    def subtract(self, a: float, b: float) -> float:
        """Subtract b from a.

        Args:
            a: The number to subtract from.
            b: The number to subtract.
        """
        return self._done(a - b)

    def multiply(self, a: float, b: float) -> float:
        """Multiply two numbers.

        Args:
            a: The first number.
            b: The second number.
        """
        return self._done(a * b)

    def get_reward(self) -> float:
        return float(self.last is not None and self.target is not None and abs(self.last - self.target) < 1e-6)


class GuessNumber:
    """A hidden integer, found by guessing: each guess is answered higher, lower or correct."""

    def __init__(self):
        self.secret, self.left, self.solved = None, 0, False

    def reset(self, secret: int | None = None, horizon: int = 1, **row) -> None:
        self.secret, self.left, self.solved = secret, horizon, False

    def guess(self, number: int) -> str:
        """Guess the hidden number.

        Args:
            number: The guess.
        """
        if self.solved or self.left <= 0:
            return "no guesses left"
        self.left -= 1
        if number == self.secret:
            self.solved = True
            return "correct"
        return "higher" if self.secret > number else "lower"

    def get_reward(self) -> float:
        return float(self.solved)


SHIPPED = {"calculator": Calculator, "guess": GuessNumber}
WORDS = {"add": "increased by", "subtract": "decreased by", "multiply": "multiplied by"}


def _call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def _calculator(value: int, steps: list[tuple[str, int]]) -> str:
    said = ", then ".join(f"{WORDS[op]} {b}" for op, b in steps)
    return f"Take {value}, {said}. What is the result? Use the tools for every step."


def _guess(horizon: int) -> str:
    return (f"I am thinking of an integer from 1 to {2 ** horizon}. Find it: call guess with a number, and I answer "
            f"higher, lower or correct. You have {horizon} guess{'es' * (horizon > 1)}.")


# One demonstration per environment, the same in every row: a first move on a fixed instance.
DEMO = {"calculator": (_calculator(5120, [("subtract", 37)]), _call("subtract", a=5120, b=37)),
        "guess": (_guess(3), _call("guess", number=4))}


def rows(name: str, n: int, seed: int, horizon: int, *, demo: bool = True) -> list[dict]:
    """`n` episodes' rows of a shipped environment at `horizon` (ids `<name>-h<horizon>-<seed>-<i>`): the prompt (a
    conversation opening with the environment's demonstration; with `demo=False`, the question alone) and the
    fields `reset` takes."""
    if name not in SHIPPED:
        raise ValueError(f"unknown shipped environment {name!r}; expected one of {', '.join(SHIPPED)}")
    rng, out = random.Random(f"{name}/{seed}/{horizon}"), []
    for i in range(n):
        if name == "calculator":
            value, steps = rng.randint(100, 9999), []
            target = value
            for _ in range(horizon):
                op, b = rng.choice(list(WORDS)), rng.randint(10, 999)
                target = {"add": target + b, "subtract": target - b, "multiply": target * b}[op]
                steps.append((op, b))
            question, fields = _calculator(value, steps), {"target": target}
        else:
            question, fields = _guess(horizon), {"secret": rng.randint(1, 2 ** horizon)}
        shown = [{"role": "user", "content": DEMO[name][0]}, {"role": "assistant", "content": DEMO[name][1]}]
        prompt = [*shown * demo, {"role": "user", "content": question}]
        out.append({"id": f"{name}-h{horizon}-{seed}-{i}", "horizon": horizon, "prompt": prompt, **fields})
    return out
