"""Verifiable rewards, registered by name.

A reward is a plain callable ``(completion: str, reference) -> float`` in [0, 1]
that never raises on model output, never evaluates model text as code, and
returns within about a second from any thread::

    import hyper_es as hx
    hx.rewards.get("countdown")(completion, {"numbers": [4, 7, 8, 8], "target": 24})
"""

from hyper_es.rewards import expression, extract, sandbox
from hyper_es.rewards.registry import Reward, failures, get, names, register, safe_reward
from hyper_es.rewards import scorers  # noqa: E402  (registers the built-ins)

__all__ = ["Reward", "failures", "expression", "extract", "get", "names", "register", "safe_reward", "sandbox", "scorers"]
