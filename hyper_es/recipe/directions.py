"""Directions that exist already: PEFT LoRA adapters, or a DirectionSet saved by the API, searched instead of (or
beside a baseline of) the gradient stage's jobs."""

from __future__ import annotations

from pydantic import Field, model_validator

from hyper_es.recipe.fields import Strict


class AdapterRef(Strict):
    path: str = Field(description="a PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors), "
                      "relative to the recipe's folder")
    name: str | None = Field(None, description="the direction's name (default: the folder's name)")


class DirectionsConfig(Strict):
    """`directions:` names the directions to search; the gradient stage then trains none (only the GRPO-LoRA
    baseline, with `baseline: true`)."""

    adapters: list[str | AdapterRef] | None = Field(
        None, description="PEFT LoRA adapter folders for the recipe's model: a path, or {path, name}")
    set: str | None = Field(None, description="a folder written by DirectionSet.save (the Python API)")
    allow_bases: list[str] = Field(
        default_factory=list, description="bases an adapter's config may name besides model.name (an adapter of "
        "the same shapes trained on another base is refused otherwise)")
    baseline: bool = Field(False, description="`hyper-es run` also trains the GRPO-LoRA baseline (the gradient "
                           "section) and reports against it")

    @model_validator(mode="after")
    def _one_source(self) -> DirectionsConfig:
        if (self.adapters is None) == (self.set is None):
            raise ValueError("expected exactly one of adapters (PEFT folders) or set (a saved DirectionSet)")
        if self.adapters is not None:
            if not self.adapters:
                raise ValueError("adapters: expected at least one adapter folder")
            names = [self.ref(i)[1] for i in range(len(self.adapters))]
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise ValueError(f"adapters: direction names must be unique; repeated: {', '.join(dup)} (give each "
                                 f"a name: {{path: ..., name: ...}})")
            if "baseline" in names:
                raise ValueError("adapters: 'baseline' is the GRPO-LoRA baseline's name; name the adapter otherwise")
        return self

    def ref(self, i: int) -> tuple[str, str]:
        """(path, direction name) of adapter i."""
        a = self.adapters[i]
        path = a if isinstance(a, str) else a.path
        name = (None if isinstance(a, str) else a.name) or path.rstrip("/\\").replace("\\", "/").split("/")[-1]
        return path, name
