"""Safe, bounded arithmetic evaluator for model-written expressions.

Only ``ast.parse`` (which builds a tree and runs nothing) touches the text; the
tree is then walked against a whitelist: + - * / (and ** if allowed), unary +/-,
and int/float literals.  Every result is an exact ``Fraction``.
"""

from __future__ import annotations

import ast
import re
from fractions import Fraction

__all__ = ["ExpressionError", "evaluate", "literals", "normalize"]

MAX_BITS = 4096  # numerator/denominator bit length bound for any intermediate
MAX_DEPTH = 100  # operator nesting bound
MAX_EXP = 64  # |exponent| bound for **
MAX_LITERAL_EXP = 1000  # |e| bound in float literals like 1e300

_FLOAT_LIT = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE]([+-]?\d+))?", re.ASCII)
_OPS: dict[type, str] = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}


class ExpressionError(ValueError):
    """The text is not an allowed, bounded arithmetic expression."""


def _parse(text: object, max_len: int) -> tuple[ast.expr, str]:
    if not isinstance(text, str):
        raise ExpressionError("expression must be a str")
    src = " ".join(text.split())  # newlines are not allowed in eval mode
    if not src or len(src) > max_len:
        raise ExpressionError(f"expression empty or longer than {max_len} chars")
    try:
        return ast.parse(src, mode="eval").body, src
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as e:
        raise ExpressionError(f"unparsable expression: {type(e).__name__}") from None


def _literal(node: ast.Constant, src: str) -> int | Fraction:
    value = node.value
    if type(value) is int:
        return value
    if type(value) is not float:  # bool, str, bytes, complex, None, Ellipsis
        raise ExpressionError(f"literal {type(value).__name__} not allowed")
    seg = (ast.get_source_segment(src, node) or "").replace("_", "")
    m = _FLOAT_LIT.fullmatch(seg)
    if m is None or (m.group(1) and abs(int(m.group(1))) > MAX_LITERAL_EXP):
        raise ExpressionError(f"float literal {seg[:20]!r} not allowed")
    return Fraction(seg)  # exact decimal value, not the binary float


def _check(x: Fraction) -> Fraction:
    if x.numerator.bit_length() > MAX_BITS or x.denominator.bit_length() > MAX_BITS:
        raise ExpressionError("intermediate value too large")
    return x


def _pow(base: Fraction, exp: Fraction) -> Fraction:
    if exp.denominator != 1 or abs(exp) > MAX_EXP:
        raise ExpressionError("exponent must be an integer with |exp| <= 64")
    size = max(base.numerator.bit_length(), base.denominator.bit_length())
    if size * abs(int(exp)) > MAX_BITS:
        raise ExpressionError("power too large")
    if base == 0 and exp < 0:
        raise ExpressionError("division by zero")
    return base ** int(exp)


def _walk(node: ast.expr, src: str, allow_pow: bool, depth: int, lits: list) -> Fraction:
    if depth > MAX_DEPTH:
        raise ExpressionError("expression nested too deeply")
    if isinstance(node, ast.Constant):
        lit = _literal(node, src)
        lits.append(lit)
        return _check(Fraction(lit))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _walk(node.operand, src, allow_pow, depth + 1, lits)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        if isinstance(node.op, ast.Pow) and not allow_pow:
            raise ExpressionError("'**' not allowed")
        # Right operand first: for 9**9**9**9 the inner power is rejected before
        # anything huge is attempted.
        b = _walk(node.right, src, allow_pow, depth + 1, lits)
        a = _walk(node.left, src, allow_pow, depth + 1, lits)
        if isinstance(node.op, ast.Add):
            return _check(a + b)
        if isinstance(node.op, ast.Sub):
            return _check(a - b)
        if isinstance(node.op, ast.Mult):
            return _check(a * b)
        if isinstance(node.op, ast.Div):
            if b == 0:
                raise ExpressionError("division by zero")
            return _check(a / b)
        return _check(_pow(a, b))
    raise ExpressionError(f"{type(node).__name__} not allowed")


def _run(text: object, allow_pow: bool, max_len: int) -> tuple[Fraction, list]:
    node, src = _parse(text, max_len)
    lits: list = []
    value = _walk(node, src, allow_pow, 0, lits)
    lits.reverse()  # _walk visits right-to-left; restore source order
    return value, lits


def evaluate(text: str, *, allow_pow: bool = True, max_len: int = 500) -> Fraction:
    """Exact value of an arithmetic expression; raises ``ExpressionError``."""
    return _run(text, allow_pow, max_len)[0]


def literals(text: str, *, allow_pow: bool = True, max_len: int = 500) -> list[int | Fraction]:
    """Numeric literals of a valid expression, in source order (floats as Fraction).

    The expression is fully validated and evaluated, so this raises
    ``ExpressionError`` exactly when ``evaluate`` would.
    """
    return _run(text, allow_pow, max_len)[1]


# --- notation normalisation (LaTeX / unicode -> Python arithmetic) ----------
_FRAC_DIGITS = re.compile(r"\\[dt]?frac\s*(\d)\s*(\d)", re.ASCII)  # \frac12
_FRAC = re.compile(r"\\[dt]?frac\s*(?=\{)")
_FRAC_MID = re.compile(r"\}\s*\{")
_TEXT_CMD = re.compile(r"\\(?:text|textbf|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_REPLACE = (
    ("\\left", ""), ("\\right", ""), ("\\displaystyle", ""), ("\\!", ""), ("\\,", ""),
    ("\\;", ""), ("\\ ", " "), ("~", " "), ("\\$", ""), ("$", ""), ("\\%", ""), ("%", ""),
    ("\\cdot", "*"), ("\\times", "*"), ("\\div", "/"), ("×", "*"), ("÷", "/"),
    ("·", "*"), ("−", "-"), ("–", "-"), ("\\approx", "="), ("≈", "="),
    ("^{\\circ}", ""), ("^\\circ", ""), ("°", ""), ("^", "**"),
)


def normalize(text: str) -> str:
    """Rewrite common LaTeX/unicode arithmetic into Python syntax (no evaluation).

    ``\\frac{a}{b}`` -> ``(a)/(b)``, ``\\frac12`` -> ``(1)/(2)``, ``^`` -> ``**``,
    ``\\times``/``×`` -> ``*``, ``\\div``/``÷`` -> ``/``, braces -> parentheses;
    ``≈``/``\\approx`` -> ``=``; ``$``, ``%``, degrees, spacing commands and
    ``\\text{..}`` wrappers are dropped.
    """
    text = _TEXT_CMD.sub(r" \1 ", text)
    text = _FRAC_DIGITS.sub(r"(\1)/(\2)", text)
    if _FRAC.search(text):
        text = _FRAC_MID.sub(")/(", _FRAC.sub("", text))
    for old, new in _REPLACE:
        text = text.replace(old, new)
    return text.replace("{", "(").replace("}", ")")
