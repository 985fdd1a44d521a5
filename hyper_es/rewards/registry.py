"""Name -> reward registry.

A reward is a plain callable ``(completion: str, reference) -> float`` in [0, 1]
that never raises on model output.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections import Counter
from typing import Any, Callable

from hyper_es.errors import ConfigError

__all__ = ["Reward", "failures", "get", "names", "register", "safe_reward"]

Reward = Callable[[str, Any], float]
logger = logging.getLogger(__name__)

_REGISTRY: dict[str, Reward] = {}
_IMPORTED: dict[str, Reward] = {}
_FAILURES: Counter[str] = Counter()  # reward name -> calls that raised (and scored 0), for the logs
_LOCK = threading.Lock()


def register(name: str) -> Callable[[Reward], Reward]:
    """Decorator registering ``fn`` under ``name`` (returned unchanged).

    Registering the same function again is a no-op; a different function under a
    taken name raises ``ValueError``.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"reward name must be a non-empty str, got {name!r}")

    def deco(fn: Reward) -> Reward:
        if not callable(fn):
            raise ValueError(f"reward {name!r} must be callable, got {fn!r}")
        with _LOCK:
            old = _REGISTRY.get(name)
            if old is not None and old is not fn:
                raise ValueError(f"reward {name!r} is already registered to {old!r}")
            _REGISTRY[name] = fn
        return fn

    return deco


def names() -> list[str]:
    """Sorted registered reward names."""
    return sorted(_REGISTRY)


def get(name: str) -> Reward:
    """The reward registered under ``name``, or a user callable given as ``"package.module:function"``.

    ``ConfigError`` (a ``HyperESError`` and a ``ValueError``) if unknown or not importable.
    """
    if isinstance(name, str) and ":" in name:
        with _LOCK:
            if name not in _IMPORTED:
                fn = _import(name)  # a user reward is wrapped like the built-ins (which are wrapped already)
                _IMPORTED[name] = fn if fn in _REGISTRY.values() else safe_reward(fn, name=name)
            return _IMPORTED[name]
    fn = _REGISTRY.get(name) if isinstance(name, str) else None
    if fn is None:
        raise ConfigError(
            f"unknown reward {name!r}; expected one of: {', '.join(names())} (or 'package.module:function')"
        )
    return fn


def _import(spec: str) -> Reward:
    from hyper_es.refs import import_ref

    fn = import_ref(spec, "reward")
    if not callable(fn):
        raise ConfigError(f"reward {spec!r} is not callable")
    return fn


def failures() -> dict[str, int]:
    """How many calls of each reward raised (and scored 0) in this process so far."""
    with _LOCK:
        return dict(_FAILURES)


def safe_reward(fn: Callable[[str, Any], float], *, name: str | None = None) -> Reward:
    """Wrap a scorer so it returns 0.0 for non-str completions or on any exception (counted in `failures()`),
    and always a float clamped to [0, 1] (NaN -> 0.0)."""
    label = name or getattr(fn, "__name__", repr(fn))

    @functools.wraps(fn)
    def wrapper(completion: str, reference: Any = None) -> float:
        if not isinstance(completion, str):
            return 0.0
        try:
            score = float(fn(completion, reference))
        except Exception:  # model output must never crash training
            logger.debug("reward %s raised; scoring 0", label, exc_info=True)
            with _LOCK:
                _FAILURES[label] += 1
            return 0.0
        return min(1.0, max(0.0, score)) if math.isfinite(score) else 0.0

    return wrapper
