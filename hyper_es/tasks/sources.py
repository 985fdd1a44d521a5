"""Load task rows (plain dicts with at least `question`/`answer`) from each kind of data source."""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import math
import os
from pathlib import Path
from typing import Any

from hyper_es.errors import DataError
from hyper_es.recipe import BuiltinSource, EnvironmentSource, FileSource, HFSource, ReasoningGymSource, Source

logger = logging.getLogger(__name__)


def data_dir() -> Path:
    """The shipped held-out data: $HYPER_ES_DATA, else the repository's `data/`."""
    return Path(os.environ.get("HYPER_ES_DATA") or Path(__file__).resolve().parents[2] / "data")


def builtin_names() -> list[str]:
    return sorted(p.stem for p in data_dir().glob("*.jsonl"))


def _jsonable(v: Any) -> bool:
    return isinstance(v, (str, int, float, bool)) or (isinstance(v, list) and all(_jsonable(x) for x in v))


def _reasoning_gym(src: ReasoningGymSource, share: tuple[float, float] | None = None) -> list[dict]:
    """The generator's first `size` items; with `share` (a range of the question hash), its first `size` distinct
    questions whose hash falls in that range."""
    import reasoning_gym

    draws = src.size if share is None else 20 * math.ceil(src.size / (share[1] - share[0])) + 1000
    try:
        ds = reasoning_gym.create_dataset(src.dataset, size=draws, seed=src.seed, **src.config)
    except Exception as exc:  # unknown name or bad config: reasoning-gym raises various types
        raise DataError(f"reasoning_gym dataset '{src.dataset}' with config {src.config}: {exc}") from None
    rows, seen = [], set()
    for i in range(draws):
        item = ds[i]
        if share is not None:
            if item["question"] in seen or not share[0] <= question_hash(item["question"]) < share[1]:
                continue
            seen.add(item["question"])
        row = {k: v for k, v in (item.get("metadata") or {}).items() if _jsonable(v)}
        row.update(id=f"{src.dataset}-{src.seed}-{i}", question=item["question"], answer=str(item["answer"]))
        rows.append(row)
        if len(rows) == src.size:
            return rows
    raise DataError(f"reasoning_gym:{src.dataset} with config {src.config}: only {len(rows)} distinct questions of "
                    f"this split's share of the hash range in {draws:,} draws, but `size` asks for {src.size}; the "
                    f"config's problem space is too small for these sizes: lower them or widen the config")


def question_hash(question: str) -> float:
    """A question's place in [0, 1), from its text alone: the same question lands in the same split everywhere."""
    digest = hashlib.sha256(b"hyper-es/split/v1:" + question.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{n}: invalid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise DataError(f"{path}:{n}: expected a JSON object per line, got {type(row).__name__}")
            rows.append(row)
    return rows


def _read_file(path: Path, fmt: str | None) -> list[dict]:
    if not path.is_file():
        raise DataError(f"{path}: no such data file")
    fmt = fmt or path.suffix.lstrip(".").lower()
    if fmt == "jsonl":
        return _read_jsonl(path)
    if fmt == "json":
        data = json.loads(path.read_text(encoding="utf-8"))
        if not (isinstance(data, list) and all(isinstance(r, dict) for r in data)):
            raise DataError(f"{path}: expected a JSON list of objects")
        return data
    if fmt == "csv":
        with path.open(newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    raise DataError(f"{path}: unknown data format '{fmt}'; expected one of: jsonl, json, csv, parquet")


def _hf(src: HFSource) -> list[dict]:
    import datasets

    try:
        ds = datasets.load_dataset(src.path, src.name, split=src.split, data_files=src.data_files)
    except Exception as exc:
        raise DataError(f"datasets.load_dataset('{src.path}', split='{src.split}') failed: {exc}") from None
    return list(ds)


def _rename(rows: list[dict], fields: dict[str, str], where: str) -> list[dict]:
    for ours, theirs in fields.items():
        for i, row in enumerate(rows):
            if theirs not in row:
                raise DataError(f"{where}: row {i} has no column '{theirs}' (mapped to '{ours}' by `fields`)")
            row[ours] = row[theirs]
    return rows


def source_name(src: Source, base_dir: Path) -> str:
    """Where a split's rows come from, for messages: a file path, or the generator or dataset."""
    if isinstance(src, ReasoningGymSource):
        return f"reasoning_gym:{src.dataset}"
    if isinstance(src, FileSource):
        return str(Path(src.path) if Path(src.path).is_absolute() else base_dir / src.path)
    if isinstance(src, HFSource):
        return f"hf:{src.path}"
    if isinstance(src, BuiltinSource):
        return str(data_dir() / f"{src.name}.jsonl")
    if isinstance(src, EnvironmentSource):
        return f"environment:{src.name}"
    return type(src).__name__  # pragma: no cover - the recipe schema admits only the above


def load_rows(src: Source, base_dir: Path, share: tuple[float, float] | None = None) -> list[dict]:
    """Rows of one split; every row gets a string `id`. `share`: a generated split's range of the question hash."""
    if isinstance(src, ReasoningGymSource):
        rows, where = _reasoning_gym(src, share), f"reasoning_gym:{src.dataset}"
    elif isinstance(src, FileSource):
        path = Path(src.path) if Path(src.path).is_absolute() else base_dir / src.path
        rows, where = _rename(_read_file(path, src.format), src.fields, str(path)), str(path)
    elif isinstance(src, HFSource):
        rows, where = _rename(_hf(src), src.fields, src.path), f"hf:{src.path}"
    elif isinstance(src, BuiltinSource):
        path = data_dir() / f"{src.name}.jsonl"
        if not path.is_file():
            raise DataError(f"builtin data '{src.name}' not found; expected one of: {', '.join(builtin_names())}")
        rows, where = _read_jsonl(path), str(path)
    elif isinstance(src, EnvironmentSource):
        from hyper_es.environments import rows as episode_rows

        rows, where = episode_rows(src.name, src.size, src.seed, src.horizon), f"environment:{src.name}"
    else:  # pragma: no cover - the recipe schema admits only the above
        raise TypeError(src)
    limit = getattr(src, "limit", None)
    rows = rows[:limit] if limit else rows
    for i, row in enumerate(rows):
        row.setdefault("id", f"{i}")
        row["id"] = str(row["id"])
    logger.debug("loaded %d rows from %s", len(rows), where)
    return rows
