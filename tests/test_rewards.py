"""Rewards: registry, extraction, scorers, adversarial inputs, threads, sandbox."""

from __future__ import annotations

import os
import random
import string
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import hyper_es as hx
from hyper_es.rewards import extract, registry, sandbox

pytestmark = pytest.mark.timeout(120)

BUILTINS = ["countdown", "format", "math", "numeric", "numeric_partial"]
CD_REF = {"numbers": [4, 7, 8, 8], "target": 24}
REFS = {"countdown": CD_REF, "format": None, "math": "72", "numeric": "72", "numeric_partial": "72"}


@pytest.fixture()
def warm() -> None:
    sandbox.warmup()


# --- registry -------------------------------------------------------------------
def test_names() -> None:
    names = hx.rewards.names()
    assert names == sorted(names) and set(BUILTINS) <= set(names)


def test_unknown_name() -> None:
    with pytest.raises(ValueError) as e:
        hx.rewards.get("nope")
    assert str(e.value).startswith(f"unknown reward 'nope'; expected one of: {', '.join(hx.rewards.names())}")
    assert "expected one of: countdown, format, math, numeric" in str(e.value)


def test_import_path_rewards() -> None:
    fn = hx.rewards.get("hyper_es.rewards.scorers:numeric")
    assert fn is hx.rewards.get("numeric")
    with pytest.raises(ValueError, match="could not be imported"):
        hx.rewards.get("no_such_module_xyz:fn")
    with pytest.raises(ValueError, match="could not be imported"):
        hx.rewards.get("hyper_es.rewards.scorers:no_such_fn")


def test_user_reward_that_raises_scores_zero_and_is_counted() -> None:
    fn = hx.rewards.get("dense_reward:raises_on_digits")
    assert fn is hx.rewards.get("dense_reward:raises_on_digits")
    before = hx.rewards.failures().get("dense_reward:raises_on_digits", 0)
    assert fn("no numbers here", None) == 1.0
    assert fn("42", None) == 0.0 and fn("7", None) == 0.0
    assert hx.rewards.failures()["dense_reward:raises_on_digits"] == before + 2


def test_register() -> None:
    def mine(completion: str, reference: object) -> float:
        return 1.0

    try:
        assert hx.rewards.register("test_mine")(mine) is mine
        assert hx.rewards.get("test_mine") is mine and "test_mine" in hx.rewards.names()
        hx.rewards.register("test_mine")(mine)  # same function again: no-op
        with pytest.raises(ValueError):
            hx.rewards.register("test_mine")(lambda c, r: 0.0)
        with pytest.raises(ValueError):
            hx.rewards.register("math")(mine)
        with pytest.raises(ValueError):
            hx.rewards.register("test_bad")(42)  # type: ignore[arg-type]
    finally:
        registry._REGISTRY.pop("test_mine", None)


def test_safe_reward() -> None:
    def boom(completion: str, reference: object) -> float:
        raise RuntimeError

    assert registry.safe_reward(boom)("x", None) == 0.0
    assert registry.safe_reward(lambda c, r: 7)("x", None) == 1.0
    assert registry.safe_reward(lambda c, r: float("nan"))("x", None) == 0.0
    assert registry.safe_reward(lambda c, r: 1.0)(None, None) == 0.0  # type: ignore[arg-type]


# --- extraction -----------------------------------------------------------------
def test_last_boxed() -> None:
    assert extract.last_boxed(r"\boxed{1} then \boxed{\frac{1}{2}}.") == r"\frac{1}{2}"
    assert extract.last_boxed(r"\boxed {x}") == "x"
    assert extract.last_boxed(r"\fbox{7}") == "7"
    assert extract.last_boxed(r"\boxed{\{1, 2\}}") == r"\{1, 2\}"
    assert extract.last_boxed(r"\boxed{1") is None
    assert extract.last_boxed("no box") is None
    assert extract.last_boxed(r"\boxed{" + "1" * 20_000 + "}") is None  # too long


def test_last_tag_and_number() -> None:
    assert extract.last_tag("<answer>1</answer><answer> 2 </answer>", "answer") == "2"
    assert extract.last_tag("<answer>1", "answer") is None
    assert extract.last_number("from 3 to 1,234.5 apples") == "1,234.5"
    assert extract.last_number("10-5") == "5"
    assert extract.last_number("x = -3.") == "-3"
    assert extract.last_number("so 3/4 of them") == "3/4"
    assert extract.last_number("١٢ ٣") is None  # non-ASCII digits are not digits


def test_final_answer_priority() -> None:
    fa = extract.final_answer
    assert fa(r"<answer>5</answer> \boxed{6} #### 7 8") == "5"
    assert fa(r"<answer>\boxed{5}</answer>") == "5"
    assert fa(r"\boxed{6} #### 7 8") == "6"
    assert fa("#### 7\nbye 8") == "7"
    assert fa("it is 8 or 9.") == "9"
    assert fa("nothing") is None and fa(None) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    [
        "1" * 10**6,
        "(" * 10**6,
        "1 " * 500_000,
        "1," * 500_000,
        "\\boxed{" * 140_000,
        "{" * 10**6,
        "<answer>" * 120_000,
        "#### " * 200_000,
        "-" * 10**6,
        "".join(random.Random(0).choice(string.printable) for _ in range(10**6)),
    ],
    ids=["ones", "parens", "spaced", "commas", "boxes", "braces", "tags", "hashes", "minus", "junk"],
)
def test_extract_linear_time(text: str) -> None:
    t0 = time.process_time()  # this process's CPU time: what a loaded machine does not stretch
    extract.final_answer(text)
    extract.last_boxed(text)
    extract.last_number(text)
    extract.last_tag(text, "answer")
    assert time.process_time() - t0 < 0.1


# --- scorers --------------------------------------------------------------------
@pytest.mark.parametrize(
    "completion, numbers, target, score",
    [
        ("<answer>(7 - 8/8) * 4</answer>", [4, 7, 8, 8], 24, 1.0),
        ("think... <answer> (7 - 8 / 8) * 4 = 24 </answer>", [4, 7, 8, 8], 24, 1.0),
        ("<answer>24 = 4 * (7 - 8/8)</answer>", [4, 7, 8, 8], 24, 1.0),
        ("<answer>(7 − 8 ÷ 8) × 4</answer>", [4, 7, 8, 8], 24, 1.0),
        ("<answer>4+7+8+8</answer> <answer>(7 - 8/8) * 4</answer>", [4, 7, 8, 8], 24, 1.0),
        ("<answer>(7 - 8/8) * 4</answer> <answer>4+7+8+8</answer>", [4, 7, 8, 8], 24, 0.0),
        ("<answer>(8 - 4) * 7 - 8 + 4</answer>", [4, 7, 8, 8], 24, 0.0),  # extra 4
        ("<answer>8 * (7 - 4)</answer>", [4, 7, 8, 8], 24, 0.0),  # an 8 unused
        ("<answer>(7 - 7/7) * 4</answer>", [4, 7, 8, 8], 24, 0.0),  # wrong multiset
        ("<answer>4 + 7 + 8 + 8</answer>", [4, 7, 8, 8], 24, 0.0),  # 27
        ("(7 - 8/8) * 4", [4, 7, 8, 8], 24, 0.0),  # no tag
        ("<answer>(7 - 8/8) * 4", [4, 7, 8, 8], 24, 0.0),  # unclosed tag
        ("<answer></answer>", [4, 7, 8, 8], 24, 0.0),
        ("<answer>(7 - 8.0/8) * 4</answer>", [4, 7, 8, 8], 24, 0.0),  # float literal
        ("<answer>2**3 * 1</answer>", [2, 3, 1], 8, 0.0),  # no powers
        ("<answer>2^3 * 1</answer>", [2, 3, 1], 8, 0.0),
        ("<answer>-3 + 5</answer>", [5, 3], 2, 1.0),  # unary minus allowed
        ("<answer>4 / 0</answer>", [4, 0], 4, 0.0),
        ("<answer>1 / 3</answer>", [1, 3], 0.3333333, 1.0),  # non-integer target: 1e-6
        ("<answer>1 / 3</answer>", [1, 3], "1/3", 1.0),
        ("<answer>25 - 1/1000000</answer>", [25, 1, 1000000], 25, 0.0),  # integer: exact
        ("<answer>a = b = 24</answer>", [4, 7, 8, 8], 24, 0.0),
    ],
)
def test_countdown(completion: str, numbers: list, target, score: float) -> None:
    assert hx.rewards.get("countdown")(completion, {"numbers": numbers, "target": target}) == score


def test_countdown_bad_reference() -> None:
    cd = hx.rewards.get("countdown")
    for ref in (None, {}, {"numbers": [1.5], "target": 1}, {"numbers": [4], "target": "x"}, "24"):
        assert cd("<answer>4</answer>", ref) == 0.0


@pytest.mark.parametrize(
    "completion, reference, score",
    [
        (r"so \boxed{\frac{1}{2}}", "0.5", 1.0),
        (r"so \boxed{\frac{1}{2}}", "\\frac12", 1.0),
        (r"so \boxed{\frac{1}{2}}", "\\frac{1}{3}", 0.0),
        (r"\boxed{\frac{\sqrt{3}}{2}}", "\\frac{\\sqrt3}{2}", 1.0),
        (r"\boxed{\sqrt{2}}", "2", 0.0),
        ("The answer is $72$.", "72", 1.0),
        ("The answer is $72$.", 72, 1.0),
        (r"\boxed{71}", "72", 0.0),
        (r"\boxed{72} and then " + "blah " * 3000, "72", 1.0),
        (r"\boxed{72} and then " + "blah " * 5000, "72", 0.0),  # only the last 20k chars count
        ("", "72", 0.0),
        (r"\boxed{72}", None, 0.0),
    ],
)
def test_math(warm, completion: str, reference, score: float) -> None:
    assert hx.rewards.get("math")(completion, reference) == score


@pytest.mark.parametrize(
    "completion, reference, score",
    [
        ("The answer is 1,234.", "1234", 1.0),
        ("The answer is 1,235.", "1234", 0.0),
        ("#### 72", "72", 1.0),
        ("#### 72", 72, 1.0),
        ("#### 72", "73", 0.0),
        (r"\boxed{3/4}", "0.75", 1.0),
        (r"\boxed{\frac{3}{4}}", 0.75, 1.0),
        ("It costs $3.50.", "3.5", 1.0),
        (r"\boxed{72 \text{ dollars}}", "72", 1.0),
        ("<answer>-(2+5)*3</answer>", "-21", 1.0),
        (r"<answer>5</answer> \boxed{6}", "5", 1.0),
        ("x = 50%", "50", 1.0),
        (r"\boxed{2\pi}", "2", 0.0),
        (r"\boxed{5!}", "5", 0.0),
        ("no number", "5", 0.0),
        ("٧٢", "72", 0.0),
        ("１２", "12", 0.0),
        ("x²", "2", 0.0),
        ("#### 72", None, 0.0),
    ],
)
def test_numeric(completion: str, reference, score: float) -> None:
    assert hx.rewards.get("numeric")(completion, reference) == score


@pytest.mark.parametrize(
    "completion, score",
    [
        ("<answer>x</answer>", 1.0),
        (r"\boxed{x}", 1.0),
        ("<answer> </answer>", 0.0),
        (r"\boxed{}", 0.0),
        ("<answer>x", 0.0),
        ("just text 42", 0.0),
    ],
)
def test_format(completion: str, score: float) -> None:
    assert hx.rewards.get("format")(completion, None) == score


# --- adversarial ----------------------------------------------------------------
PWN = "__import__('os').system('touch {flag}')"
ADVERSARIAL = {
    "pwn": PWN,
    "pwn_answer": f"<answer>{PWN}</answer>",
    "pwn_boxed": rf"\boxed{{{PWN}}}",
    "pwn_dollar": f"${PWN}$",
    "tower": "9**9**9**9",
    "tower_answer": "<answer>9**9**9**9</answer>",
    "tower_boxed": r"\boxed{9^{9^{9^{9}}}}",
    "tower_latex": "$9^{9^{9^{9}}}$",
    "big_exp": r"\boxed{9^{999999999}}",
    "factorial": r"\boxed{(100!)!}",
    "ones_1mb": "1" * 10**6,
    "parens_1mb": "(" * 10**6,
    "spaced_1mb": "0 " * 500_000,
    "junk_1mb": "".join(random.Random(1).choice(string.printable) for _ in range(10**6)),
    "latex_junk_1mb": "".join(random.Random(2).choice("\\{}^_$()0123456789+-*/ frac") for _ in range(10**6)),
    "boxed_1mb": r"\boxed{" + "9" * 10**6 + "}",
    "answer_1mb": "<answer>" + "9*" * 500_000 + "9</answer>",
    "nested": "(" * 500 + "1" + ")" * 500,
    "nested_answer": "<answer>" + "(" * 5000 + "1" + ")" * 5000 + "</answer>",
    "nested_boxed": r"\boxed{" + "{" * 5000 + "1" + "}" * 5000 + "}",
    "unary_answer": "<answer>" + "-" * 400 + "24</answer>",
    "unicode_digits": "٧٢ １２ ² <answer>٧٢</answer> \\boxed{１２}",
    "empty": "",
    "none": None,
    "int": 72,
    "bytes": b"72",
}


@pytest.mark.parametrize("name", BUILTINS)
@pytest.mark.parametrize("case", list(ADVERSARIAL))
def test_adversarial(warm, tmp_path, caplog, name: str, case: str) -> None:
    """Each completion is scored in range without running it, by the pre-filters (under a second of this process's
    CPU) or by math-verify within its deadline: no worker is killed for it."""
    flag = tmp_path / "pwned"
    completion = ADVERSARIAL[case]
    if isinstance(completion, str):
        completion = completion.replace("{flag}", str(flag))
    t0 = time.process_time()
    with caplog.at_level("INFO", logger=sandbox.__name__):
        score = hx.rewards.get(name)(completion, REFS[name])
    cpu = time.process_time() - t0
    assert type(score) is float and 0.0 <= score <= 1.0
    assert cpu < 1.0, f"{name}/{case} took {cpu:.3f} s of CPU"
    assert not [r for r in caplog.records if "killing worker" in r.getMessage()], f"{name}/{case} hit the deadline"
    assert not flag.exists()


# --- threads, sandbox -----------------------------------------------------------
def _mixed_calls() -> list[tuple[str, object, object]]:
    base = [
        r"\boxed{72}", r"\boxed{71}", "#### 72", "The answer is $72$.", r"\boxed{\frac{144}{2}}",
        "<answer>(7 - 8/8) * 4</answer>", "<answer>4+7+8+8</answer>", "<answer>72</answer>",
        "9**9**9**9", r"\boxed{9^{9^{9}}}", "", "0 " * 3000, "x" * 1000,
    ]
    calls = [(name, c + " " * (i % 3), REFS[name]) for i, c in enumerate(base * 4) for name in BUILTINS]
    return calls[:200]


def test_threads_match_serial(warm) -> None:
    calls = _mixed_calls()
    serial = [hx.rewards.get(n)(c, r) for n, c, r in calls]
    with ThreadPoolExecutor(8) as pool:
        threaded = list(pool.map(lambda a: hx.rewards.get(a[0])(a[1], a[2]), calls))
    assert threaded == serial
    assert sum(serial) > 10  # some calls are correct


def test_startup_not_counted_in_deadline() -> None:
    sandbox.shutdown()
    assert sandbox.worker_pid() is None
    assert hx.rewards.get("math")(r"\boxed{72}", "72") == 1.0  # cold start, then deadline
    assert sandbox.worker_pid() is not None


def test_hung_call_is_killed(warm, caplog) -> None:
    pid = sandbox.worker_pid()
    # Bypasses the reward's pre-filter: this hangs math-verify inside the worker.
    with caplog.at_level("INFO", logger=sandbox.__name__):
        assert sandbox.verify("1", r"\boxed{9^{9^{9^{9}}}}") == 0.0
    timeouts = [r.getMessage() for r in caplog.records if "killing worker" in r.getMessage()]
    assert len(timeouts) == 1 and timeouts[0].startswith(f"math-verify timed out after {sandbox.DEFAULT_DEADLINE:.2f}s")
    assert sandbox.worker_pid() is None  # killed, restarted lazily
    assert hx.rewards.get("math")(r"\boxed{72}", "72") == 1.0
    assert sandbox.worker_pid() not in (None, pid)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_gets_own_worker(warm) -> None:
    parent_worker = sandbox.worker_pid()
    r, w = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            ok = hx.rewards.get("math")(r"\boxed{72}", "72") == 1.0
            code = 0 if ok and sandbox.worker_pid() not in (None, parent_worker) else 2
        finally:
            os.write(w, bytes([code]))
            os._exit(0)
    os.close(w)
    try:
        assert os.read(r, 1) == b"\x00"
    finally:
        os.close(r)
        os.waitpid(child, 0)
    assert sandbox.worker_pid() == parent_worker
    assert hx.rewards.get("math")(r"\boxed{72}", "72") == 1.0


@pytest.mark.parametrize("completion,score", [
    ("\\boxed{72}", 1.0), ("so 72.", 1.0), ("about 36", 0.25), ("it is 0", 0.0), ("about 70", 0.5 * (1 - 2 / 72)), ("no number", 0.0),
    ("-1000", 0.0),
])
def test_numeric_partial_gives_dense_credit(completion, score):
    assert hx.rewards.get("numeric_partial")(completion, "72") == pytest.approx(score, abs=1e-9)


def test_numeric_reference_may_be_a_worked_solution():
    """GSM8K's train split gives the reference as a rationale ending in '#### 72'."""
    ref = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72"
    assert hx.rewards.get("numeric")("so the answer is \\boxed{72}", ref) == 1.0
    assert hx.rewards.get("numeric")("\\boxed{24}", ref) == 0.0
    assert hx.rewards.get("numeric_partial")("\\boxed{72}", ref) == 1.0
