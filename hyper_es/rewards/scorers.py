"""Built-in rewards: ``math``, ``numeric``, ``countdown``, ``format``."""

from __future__ import annotations

import logging
import math
import numbers
import re
from decimal import Decimal
from fractions import Fraction
from typing import Any

from hyper_es.rewards import sandbox
from hyper_es.rewards.expression import ExpressionError, evaluate, literals, normalize
from hyper_es.rewards.extract import final_answer, last_boxed, last_tag
from hyper_es.rewards.registry import register, safe_reward

__all__ = ["countdown", "format_reward", "math_reward", "numeric", "numeric_partial", "to_number"]

logger = logging.getLogger(__name__)

TAIL_CHARS = 20_000  # math: only the end of a completion is searched for \boxed
NO_BOXED_CHARS = 4_000  # math: without \boxed, math-verify sees this many final chars
MAX_ANSWER_CHARS = 500  # longer final answers score 0 (never parsed)
COUNTDOWN_TOL = 1e-6  # used only for non-integer targets

_GROUP_COMMA = re.compile(r"(?<=\d),(?=\d{3}(?!\d))", re.ASCII)
_LEADING = re.compile(r"^\s*+(?:[A-Za-z]++[:\s]++)*+", re.ASCII)  # "approximately 5" -> "5"
_TRAILING = re.compile(r"(?:\s++[A-Za-z]*+|\.)*+$", re.ASCII)  # "72 dollars." -> "72"
_PLAIN_NUMBER = re.compile(r"\s*-?\d+(?:\.\d+)?\s*", re.ASCII)
# Inputs on which sympy may hang or blow up (all linear-time patterns):
_PATHOLOGICAL = re.compile(
    r"(?:\^|\*\*)\s*+[{(]?\s*+\d++\s*+(?:[})]\s*+)?(?:\^|\*\*)\s*+[{(]?\s*+\d"  # 9^{9^{9}}
    r"|(?:\^|\*\*)\s*+[{(]?\s*+\d{5}"  # exponent >= 10000
    r"|(?<!\d)\d{4,}+\s*+!|!\s*+[)}]\s*+!"  # 1000!, (9!)!
    r"|(?<!\d)\d{300}",  # 300+ digit number
    re.ASCII,
)


def to_number(value: Any) -> Fraction | None:
    """Exact value of a final answer or reference (str or number), or None.

    Strings: unwrap ``\\boxed``, LaTeX/unicode -> Python arithmetic, keep the text
    after the last ``=``, drop digit-group commas, leading words ("approximately")
    and trailing space-separated words (units) or ``.``, then evaluate safely
    (``3/4``, ``-(2+5)*3``).  "2pi", "5!" or "sqrt(2)" do not parse (no credit).
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, (numbers.Rational, Decimal)):  # int, Fraction, numpy ints
        return Fraction(value) if not isinstance(value, Decimal) or value.is_finite() else None
    if isinstance(value, numbers.Real):  # float, numpy floats: their shortest decimal repr
        return Fraction(str(float(value))) if math.isfinite(value) else None
    if not isinstance(value, str) or len(value) > MAX_ANSWER_CHARS:
        return None
    s = normalize(last_boxed(value) or value).rsplit("=", 1)[-1]
    s = _TRAILING.sub("", _LEADING.sub("", _GROUP_COMMA.sub("", s)))
    try:
        return evaluate(s)
    except ExpressionError:
        return None


def _math_prediction(completion: str) -> str | None:
    """What math-verify gets: the last ``\\boxed{..}`` alone if there is one (its
    boxed pattern wins anyway), else the last NO_BOXED_CHARS chars; None if that
    is empty, too long or may hang sympy.  (math-verify's extraction regexes are
    quadratic on e.g. "0 0 0 ...", 20k chars of which take ~1.5 s.)"""
    tail = completion[-TAIL_CHARS:]
    boxed = last_boxed(tail)
    if boxed is not None:
        pred = f"$\\boxed{{{boxed}}}$" if boxed and len(boxed) <= MAX_ANSWER_CHARS else ""
    else:
        pred = tail[-NO_BOXED_CHARS:]
    return pred if pred.strip() and not _PATHOLOGICAL.search(pred) else None


@register("math")
@safe_reward
def math_reward(completion: str, reference: Any) -> float:
    """math-verify equivalence with ``reference`` (a LaTeX/plain answer string)."""
    if isinstance(reference, (numbers.Number, Decimal)) and not isinstance(reference, bool):
        reference = str(reference)
    if not isinstance(reference, str) or not reference.strip():
        logger.warning("math reward: reference must be a non-empty str, got %r", reference)
        return 0.0
    pred = _math_prediction(completion)
    return 0.0 if pred is None else sandbox.verify(reference, pred)


def reference_number(reference: Any) -> Fraction | None:
    """The reference as a number; a worked solution (GSM8K's "... #### 72") gives its final answer."""
    got = to_number(reference)
    if got is None and isinstance(reference, str):
        got = to_number(final_answer(reference))
    return got


@register("numeric")
@safe_reward
def numeric(completion: str, reference: Any) -> float:
    """1.0 if the final answer equals ``reference`` exactly as a rational number."""
    want = reference_number(reference)
    if want is None:
        logger.warning("numeric reward: reference %r is not a number", reference)
        return 0.0
    return float(to_number(final_answer(completion)) == want)


@register("numeric_partial")
@safe_reward
def numeric_partial(completion: str, reference: Any) -> float:
    """Dense partial credit for training: 1.0 if exact, else 0.5·max(0, 1 − |pred − ref| / max(1, |ref|)) for a
    parsed final number, else 0. Gives GRPO a signal where a weak model is almost never exactly right."""
    want = reference_number(reference)
    got = to_number(final_answer(completion))
    if want is None or got is None:
        return 0.0
    if got == want:
        return 1.0
    return 0.5 * max(0.0, 1.0 - float(abs(got - want)) / max(1.0, float(abs(want))))


def _countdown_reference(reference: Any) -> tuple[list[int], Fraction] | None:
    try:
        nums = [int(n) for n in reference["numbers"] if Fraction(n).denominator == 1]
        if len(nums) != len(reference["numbers"]):
            return None
        target = to_number(reference["target"])
    except (TypeError, KeyError, ValueError, ArithmeticError):
        return None
    return (nums, target) if target is not None else None


@register("countdown")
@safe_reward
def countdown(completion: str, reference: Any) -> float:
    """1.0 if the last <answer> holds an expression using each number exactly once
    (+ - * / and parentheses; unary minus allowed) that equals the target."""
    ref = _countdown_reference(reference)
    if ref is None:
        logger.warning("countdown reward: bad reference %r", reference)
        return 0.0
    nums, target = ref
    expr = last_tag(completion, "answer")
    if not expr or len(expr) > MAX_ANSWER_CHARS:
        return 0.0
    # "expr = 24" / "24 = expr": drop sides that are just the target number.
    sides = [s for s in normalize(expr).split("=") if s.strip()]
    if len(sides) > 1:
        sides = [s for s in sides if not (_PLAIN_NUMBER.fullmatch(s) and Fraction(s.strip()) == target)]
    if len(sides) != 1:
        return 0.0
    try:
        used = literals(sides[0], allow_pow=False)
        value = evaluate(sides[0], allow_pow=False)
    except ExpressionError:
        return 0.0
    if any(type(n) is not int for n in used) or sorted(used) != sorted(nums):
        return 0.0
    if value == target:
        return 1.0
    return float(target.denominator != 1 and abs(value - target) <= COUNTDOWN_TOL)


@register("format")
@safe_reward
def format_reward(completion: str, reference: Any = None) -> float:
    """1.0 if there is a non-empty <answer>...</answer> or \\boxed{...}; reference ignored."""
    return float(bool(last_tag(completion, "answer") or last_boxed(completion)))

