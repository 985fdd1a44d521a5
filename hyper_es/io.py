"""Run-folder files: atomic writes, and reads that turn a damaged file into one line naming it and the fix."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hyper_es.errors import DataError


def write_text_atomic(path: Path, text: str) -> None:
    """Write to a temporary sibling, then rename: a reader never sees a half-written file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_json_atomic(path: Path, data, *, indent: int | None = 1) -> None:
    write_text_atomic(path, json.dumps(data, indent=indent))


def read_json(path: Path, fix: str = "delete it to redo this stage"):
    """Parsed JSON of a run-folder file; a missing, unreadable or damaged file raises DataError naming it."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"{path}: damaged or not JSON ({type(exc).__name__}: {str(exc)[:80]}); {fix}") from None
