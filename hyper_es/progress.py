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
    from rich.console import Console
    from rich.logging import RichHandler

    level = logging.DEBUG if verbose else logging.INFO
    console = Console(stderr=True)
    if not console.is_terminal:
        console = Console(stderr=True, width=160)  # logs in files and CI: long lines, not wrapped at 80
    handler = RichHandler(console=console, show_path=False)
    logging.basicConfig(level=level, format="%(message)s", datefmt="[%X]", handlers=[handler])
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "DEBUG" if verbose else "WARNING")
    for noisy in ("httpx", "urllib3", "filelock", "datasets"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
