"""Module-level functions for tests/test_isolate.py to run in a child process (they must pickle by reference)."""

import os
import time
from pathlib import Path

HELD: list = []  # what `hold` keeps: memory that this process never gives back, as an in-process engine's


def rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def hold(mb: int) -> int:
    """Allocate and touch `mb` MB, keep it, and return how much this process's RSS grew."""
    before = rss()
    HELD.append(b"\x01" * (mb << 20))
    return rss() - before


def fail(cls_name: str, message: str):
    from hyper_es import errors

    raise getattr(errors, cls_name)(message)


def crash():
    return {}["missing"]


def sleep_after_writing_pid(path: str, seconds: float) -> None:
    Path(path).write_text(str(os.getpid()))
    time.sleep(seconds)


def log_and_getenv(message: str, name: str) -> str | None:
    import logging

    logging.getLogger("hyper_es.test").info(message)
    return os.environ.get(name)
