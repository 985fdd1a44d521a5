"""Two shipped environments (issue 45), each with a horizon knob carried by its rows: one where the tools carry the
work (`calculator`: an expression of `horizon` operations on 3-4 digit numbers, each done by a tool, then the result
submitted) and one where the environment's answers carry the information (`guess`: a hidden integer from 1 to
2**horizon, found with `horizon` guesses answered higher, lower or correct). Rows come from `rows(name, n, seed,
horizon)`; an episode's reward is 1 when it ends solved, else 0."""

from __future__ import annotations

import random


class Calculator:
    """Arithmetic through a calculator: every operation is a tool call, the result is submitted."""

    def __init__(self):
        self.target, self.submitted, self.calls = None, None, 0

    def reset(self, target: float | None = None, **row) -> None:
        self.target, self.submitted, self.calls = target, None, 0

    def add(self, a: float, b: float) -> float:
        """Add two numbers.

        Args:
            a: The first number.
            b: The second number.
        """
        self.calls += 1
        return a + b

    def subtract(self, a: float, b: float) -> float:
        """Subtract b from a.

        Args:
            a: The number to subtract from.
            b: The number to subtract.
        """
        self.calls += 1
        return a - b

    def multiply(self, a: float, b: float) -> float:
        """Multiply two numbers.

        Args:
            a: The first number.
            b: The second number.
        """
        self.calls += 1
        return a * b

    def submit(self, answer: float) -> str:
        """Submit the final result; the episode ends.

        Args:
            answer: The value of the whole expression.
        """
        self.submitted = answer
        return "submitted"

    def get_reward(self) -> float:
        return float(self.submitted is not None and self.target is not None and abs(self.submitted - self.target) < 1e-6)


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
OPS = {"add": "+", "subtract": "-", "multiply": "*"}


def rows(name: str, n: int, seed: int, horizon: int) -> list[dict]:
    """`n` episodes' rows of a shipped environment at `horizon` (ids `<name>-h<horizon>-<seed>-<i>`): the prompt and
    the fields `reset` takes."""
    rng, out = random.Random(f"{name}/{seed}/{horizon}"), []
    for i in range(n):
        if name == "calculator":
            value = rng.randint(100, 9999)
            text = str(value)
            for _ in range(horizon):
                op, b = rng.choice(list(OPS)), rng.randint(10, 999)
                value = {"add": value + b, "subtract": value - b, "multiply": value * b}[op]
                text = f"({text} {OPS[op]} {b})"
            row = {"prompt": f"Compute {text}. Use the tools for every operation, then call submit with the result.",
                   "target": value}
        elif name == "guess":
            high = 2 ** horizon
            row = {"prompt": f"I am thinking of an integer from 1 to {high}. Find it: call guess with a number, and I "
                             f"answer higher, lower or correct. You have {horizon} guess{'es' * (horizon > 1)}.",
                   "secret": rng.randint(1, high)}
        else:
            raise ValueError(f"unknown shipped environment {name!r}; expected one of {', '.join(SHIPPED)}")
        out.append({"id": f"{name}-h{horizon}-{seed}-{i}", "horizon": horizon, **row})
    return out
