"""Decoding settings shared by tasks, engines and evaluation, and the one stop-string rule."""

from __future__ import annotations

from dataclasses import dataclass, field

from hyper_es.errors import ConfigError


@dataclass(frozen=True)
class Sampling:
    """Decoding settings. temperature 0 means greedy (then n must be 1)."""

    n: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 256
    seed: int = 0
    stop: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self):
        if self.n < 1 or self.max_tokens < 1:
            raise ConfigError(f"n and max_tokens must be >= 1, got n={self.n}, max_tokens={self.max_tokens}")
        if self.temperature == 0 and self.n > 1:
            raise ConfigError(f"greedy decoding gives one sample per prompt; n={self.n} needs temperature > 0")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def truncate_at_stop(text: str, stop: tuple[str, ...]) -> str:
    """Cut the text before the first stop string (the same rule for every backend)."""
    cut = min((i for s in stop if (i := text.find(s)) >= 0), default=-1)
    return text if cut < 0 else text[:cut]
