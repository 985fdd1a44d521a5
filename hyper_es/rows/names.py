"""Row names, built and parsed here only: base, uniform, hyper-es, search-start, scaled, a direction's name,
baseline, baseline@N (the baseline's snapshot at optimizer step N), es or <start>+es (ES from a start row),
<es row>+grpo (GRPO-LoRA on ES's weights), grad-fit, merge-<method> (the directions merged by a method at one
validated scale), and any of them + "+prompt" (scored with a chosen prompt)."""

from __future__ import annotations

PROMPT = "+prompt"
SNAPSHOT = "baseline@"
MERGED = "merge-"


def snapshot(step: int) -> str:
    return f"{SNAPSHOT}{step}"


def snapshot_step(name: str) -> int | None:
    """N of baseline@N; None for any other name."""
    step = name.removeprefix(SNAPSHOT) if name.startswith(SNAPSHOT) else ""
    return int(step) if step.isdigit() else None


def baseline_candidate(name: str, start: str | None = None) -> bool:
    """A candidate of the baseline's early stop: its step 0 (the base, or the given adapter `start` it was trained
    on top of: `gradient.baseline_start`), a snapshot or the final adapter."""
    return name in (start or "base", "baseline") or snapshot_step(name) is not None


def prompted(name: str) -> str:
    return name + PROMPT


def is_prompted(name: str) -> bool:
    return name.endswith(PROMPT)


def weights_of(name: str) -> str:
    """The row whose weights a row serves (a <row>+prompt serves <row>'s)."""
    return name.removesuffix(PROMPT)


def es_row(start: str) -> str:
    return "es" if start == "base" else f"{start}+es"


def es_grpo_row(start: str) -> str:
    return f"{es_row(start)}+grpo"


def is_es(name: str) -> bool:
    return name == "es" or name.endswith("+es")


def is_es_grpo(name: str) -> bool:
    return name.endswith("es+grpo")


def merged(method: str) -> str:
    return f"{MERGED}{method}"


def merge_method(name: str) -> str | None:
    """The method of a merge-<method> row; None for any other name."""
    return name.removeprefix(MERGED) if name.startswith(MERGED) else None
