"""A comparison's plan (ROOT/compare.json): which row of which arm's run folder each label is, which labels are the
methods and which the controls, which pairs are compared, and the goal. Data only: `hyper-es report ROOT` reads
it with the per-seed run folders (ROOT/seed<N>/<arm>/) and renders the summary again from disk."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from hyper_es.errors import ConfigError
from hyper_es.io import read_json
from hyper_es.recipe.load import format_validation_error
from hyper_es.rundir import PLAN_FILE

PLAN = PLAN_FILE


class Goal(BaseModel):
    """What a method must show against the strongest control (the highest pooled accuracy on the trained tasks)."""
    model_config = ConfigDict(extra="forbid")
    points: float = 1.0  # pooled difference at least this, in points, with its CI above 0
    seeds_ahead: int = 2  # seeds whose point estimate is ahead
    # the method's optimizer steps at most this share of the baseline's; None where the directions were given (a
    # composition: the adapters exist already, so the search takes no step of its own)
    steps_ratio: float | None = 0.9


class ComparePlan(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str
    # label -> [arm folder, row name]; a null row name is the arm's baseline_best (the early stop)
    rows: dict[str, tuple[str, str | None]]
    methods: list[str]
    controls: list[str]
    refs: list[str] = Field(default_factory=list)  # besides the controls: every method is paired with them too
    pairs: list[tuple[str, str]] = Field(default_factory=list)  # further (a, b) pairs: ablations, controls, arms
    prompted: list[str] = Field(default_factory=list)  # labels whose row was scored with a chosen prompt
    transfer: str | None = None  # a held-out task, compared apart from the trained ones
    transfer_label: str | None = None  # its name in prose (default: the task's name)
    pass_k: list[str] = Field(default_factory=lambda: ["pass@1", "pass@8"])
    baseline: str = "baseline"  # the label whose steps the goal's steps ratio is taken against
    equal_arm: str | None = None  # the arm whose equal_compute.json says how its budget was matched
    scale_fit_arms: list[str] = Field(default_factory=list)  # arms with scale_fit.json
    partial_arms: list[str] = Field(default_factory=list)  # arms whose rows are shown while still evaluating
    curves: dict[str, str] = Field(default_factory=dict)  # arm -> label of its GRPO run's validation curve
    tuned: list[str] = Field(default_factory=list)  # labels charged the lr grid's other lrs (seed<N>/lr_grid.json)
    goal: Goal = Field(default_factory=Goal)

    @model_validator(mode="after")
    def _known_labels(self) -> ComparePlan:
        named = [*self.methods, *self.controls, *self.refs, *self.prompted, *self.tuned, self.baseline,
                 *(x for p in self.pairs for x in p)]
        unknown = sorted({n for n in named if n not in self.rows})
        if unknown:
            raise ValueError(f"labels {unknown} are not in rows (expected one of: {', '.join(self.rows)})")
        return self

    def all_pairs(self) -> list[tuple[str, str]]:
        """Each method against each control and ref, then the plan's further pairs, each once, in that order."""
        out = [(m, c) for m in self.methods for c in (*self.controls, *self.refs)]
        return out + [tuple(p) for p in self.pairs if tuple(p) not in out]


def read_plan(root: Path) -> ComparePlan:
    path = Path(root) / PLAN
    if not path.is_file():
        raise ConfigError(f"{path.parent}: no {PLAN}; expected the folder of a comparison (ROOT/{PLAN} and "
                          f"ROOT/seed<N>/<arm>/)")
    try:
        return ComparePlan.model_validate(read_json(path, "write it again (`bench/decide.py --summary-only` writes "
                                                          "the re-decision's)"))
    except ValidationError as exc:
        raise ConfigError(format_validation_error(path, exc)) from None


def write_plan(root: Path, plan: ComparePlan) -> Path:
    from hyper_es.io import write_json_atomic

    path = Path(root) / PLAN
    write_json_atomic(path, plan.model_dump(mode="json"))
    return path
