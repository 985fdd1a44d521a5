"""Progress bars (rich) and logging set-up shared by the CLI and long-running stages."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def progress(items: Iterable[T], description: str) -> Iterator[T]:
    """Iterate with a rich progress bar on a terminal; plain iteration otherwise (logs, CI)."""
    if not sys.stderr.isatty():
        yield from items
        return
    from rich.progress import track

    yield from track(items, description=description, transient=True)


def setup_logging(verbose: bool = False) -> None:
    from rich.logging import RichHandler

    level = logging.DEBUG if verbose else logging.INFO
    logging.basicConfig(level=level, format="%(message)s", datefmt="[%X]", handlers=[RichHandler(show_path=False)])
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "DEBUG" if verbose else "WARNING")
    for noisy in ("httpx", "urllib3", "filelock", "datasets"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
