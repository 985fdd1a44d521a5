"""How `hyper-es compare` tunes the baseline and which controls and variants it runs (`compare:`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from hyper_es.recipe.fields import PosInt, Strict

ARMS = ("main", "equal", "grid", "further")  # the command's own folders under ROOT/seed<N>/: no variant takes these names


class CompareConfig(Strict):
    lrs: list[Annotated[float, Field(gt=0)]] | None = Field(
        None, min_length=2, description="the baseline's learning-rate grid to start from; none: gradient."
        "learning_rate halved, as is, and doubled. It grows (halving or doubling its best) until the best by "
        "validation is interior, at most max_lrs in all")
    max_lrs: Annotated[int, Field(ge=2)] = 6
    equal: Literal["tokens", "seconds"] | None = Field(
        "tokens", description="the grpo-equal-compute control: the tuned baseline given the Hyper-ES row's generated "
        "tokens (or wall time) as more completions per step; none: not run")
    further: bool = Field(
        False, description="the adapter-further control (composition): the given adapter best alone on validation, "
        "trained further by the GRPO-LoRA baseline job with grpo-equal-compute's budget; needs directions.adapters "
        "and equal")
    equal_max_batches: PosInt | None = Field(None, description="cap the control's batches (then it is recorded as "
                                             "capped, not equal compute)")
    transfer: str | None = Field(None, description="a task with a test split that no stage trains or searches on, "
                                 "compared apart from the trained tasks")
    variants: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="further Hyper-ES arms, each a recipe overlay on the main run's (e.g. "
        "difficulty: {gradient: {directions_from: jobs, vary: [difficulty, seed]}}); each is a method beside "
        "hyper-es, labelled hyper-es-<name>")

    @field_validator("variants")
    @classmethod
    def _names(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for name in v:
            if name in ARMS or not name.replace("-", "").replace("_", "").isalnum():
                raise ValueError(f"variant '{name}': expected a name of letters, digits, '-' or '_', not one of "
                                 f"{', '.join(ARMS)}")
        return v
