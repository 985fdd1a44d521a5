"""`package.module:attr` references in a recipe (a user's reward, a user's environment), imported by name."""

from __future__ import annotations

from hyper_es.errors import ConfigError


def import_ref(spec: str, what: str) -> object:
    """The object `spec` ('package.module:attr') names; `what` names it in the one-line error (e.g. "reward")."""
    import importlib

    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise ConfigError(f"{what} {spec!r}: expected 'package.module:name'")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{what} {spec!r} could not be imported: {exc}") from None
