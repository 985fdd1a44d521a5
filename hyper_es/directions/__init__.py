"""Directions: the gradient stage (K GRPO-LoRA jobs) and the DirectionSet API over their ΔW."""

from hyper_es.directions.set import DirectionSet
from hyper_es.directions.sources import Direction

__all__ = ["Direction", "DirectionSet"]
