"""The re-decision's comparison plan (bench/results/decide2/compare.json): which row of which stage each label is
(bench/decide.py copies the stages to seed<N>/<stage>/), the methods, the controls and the pairs. The summary itself
is the toolkit's (`hyper-es report bench/results/decide2`, hyper_es/compare/).

    python bench/decide.py --summary-only          # writes compare.json, summary.json, summary.md, accuracy_cost.png
"""

from __future__ import annotations

from pathlib import Path

from hyper_es.compare import ComparePlan, render, write_plan

BEST = None  # the stage's baseline_best (the best candidate by validation, the base as step 0)
ROWS = {  # label -> (stage, row name in that stage's run folder)
    "base": ("main", "base"),
    "baseline": ("main", "baseline"),
    "baseline-best": ("main", BEST),
    "scaled": ("main", "scaled"),
    "grpo-equal-compute": ("equal", BEST),
    "hyper-es": ("main", "hyper-es"),
    "hyper-es-difficulty": ("difficulty", "hyper-es"),
    "hyper-es-start": ("main", "search-start"),  # the search's start (the scanned scale of x0), not searched
    "hyper-es-difficulty-start": ("difficulty", "search-start"),
    "prompt-only": ("coevolve-prompt", "hyper-es+prompt"),  # issue 22: x0 with a co-evolved prompt
    "coevolution": ("coevolve-both", "hyper-es+prompt"),  # co-evolved coefficients with their prompt
    "coevolution-own-prompt": ("coevolve-both", "hyper-es"),  # the same coefficients, the tasks' own prompts
    "scaled+prompt": ("controls", "scaled+prompt"),  # scaled with the best one-gene prompt by validation
    "hyper-es-cheap": ("cheap", "hyper-es"),  # issue 44: the cheaper search, from the main search's start
    "hyper-es-raced": ("raced", "hyper-es"),  # issue 44: today's search with its generations raced
}
PROMPTED = ("prompt-only", "coevolution", "scaled+prompt")  # rows with a chosen prompt (rows.prompt_file)
CONTROLS = ("baseline-best", "scaled", "grpo-equal-compute")
METHODS = ("hyper-es", "hyper-es-difficulty")
# Co-evolution at the parameter-only search's scorings: each arm against the base and against each other.
# Then what each arm adds over the start it searched from, and each arm against the strongest controls.
COEVOLVE_PAIRS = (("coevolution", "hyper-es"), ("coevolution", "prompt-only"), ("prompt-only", "hyper-es"),
                  ("coevolution", "coevolution-own-prompt"), ("coevolution", "base"), ("prompt-only", "base"),
                  *((arm, ref) for arm in ("coevolution", "prompt-only")
                    for ref in ("hyper-es-start", "scaled", "scaled+prompt", "grpo-equal-compute")),
                  ("scaled+prompt", "scaled"), ("hyper-es", "scaled+prompt"))
# What the search adds over its start, and whether its start alone (directions + one scanned scale) is enough.
ABLATIONS = (*((m, f"{m}-start") for m in METHODS), *((f"{m}-start", c) for m in METHODS for c in CONTROLS))
# What more compute per step buys the baseline, against its tuned early stop (a control against a control).
CONTROL_PAIRS = (("grpo-equal-compute", "baseline-best"),)
# Issue 44: the cheaper search against today's search, its start and the controls it must not fall behind.
CHEAP_PAIRS = tuple((row, ref) for row in ("hyper-es-cheap", "hyper-es-raced")
                    for ref in ("hyper-es", "hyper-es-start", "scaled", "baseline-best"))
PLAN = ComparePlan(
    title="Re-decision: Hyper-ES against the strongest simple controls (SmolLM2-135M, leak-free splits)",
    rows=ROWS, methods=list(METHODS), controls=list(CONTROLS), refs=["baseline", "base"],  # each method against each control and ref
    pairs=[*ABLATIONS, *CONTROL_PAIRS, *COEVOLVE_PAIRS, *CHEAP_PAIRS], prompted=list(PROMPTED), transfer="gsm8k",
    transfer_label="GSM8K", equal_arm="equal", scale_fit_arms=["main", "difficulty"],
    partial_arms=["main", "difficulty", "cheap", "raced"], curves={"main": "baseline", "equal": "grpo-equal-compute"})


def write_summary(results: Path, seeds: list[int]) -> dict:
    """compare.json, then the toolkit's summary of the committed stages."""
    write_plan(results, PLAN)
    summary, text = render(results, seeds)
    print(text)
    return summary
