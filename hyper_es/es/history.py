"""An ES run's folder (RUN/es/): the history that replays it, the sequenced start's update, the ES → GRPO job."""

from __future__ import annotations

import json
from pathlib import Path

from hyper_es.errors import DataError
from hyper_es.io import read_json
from hyper_es.rundir import ES_CONFIG, ES_DIR, ES_HISTORY, RESULT_FILE

HISTORY = ES_HISTORY
START = "start.safetensors"  # the start row's update (es.start: baseline | hyper-es)
FIELDS = ("iteration", "seeds", "signs", "rewards", "z", "sigma", "alpha")


def read_history(path: Path, population: int) -> list[dict]:
    """The finished iterations; a last line cut by a kill is dropped (that iteration runs again)."""
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    for i, line in enumerate(lines):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise DataError(f"{path}: line {i + 1} is not JSON; delete the file to restart ES") from None
        if not (isinstance(rec, dict) and set(FIELDS) <= set(rec) and rec["iteration"] == i
                and all(len(rec[k]) == population for k in ("seeds", "signs", "z"))):
            raise DataError(f"{path}: line {i + 1} is not iteration {i} of a population of {population} "
                            f"(expected {', '.join(FIELDS)}); delete the file to restart ES")
        out.append(rec)
    return out


def finished(out: Path, population: int) -> dict | None:
    """RUN/es/result.json when it covers the whole history: that result stands (re-scoring would only rewrite
    its timing)."""
    if not (out / RESULT_FILE).is_file():
        return None
    done = read_json(out / RESULT_FILE, "delete it to finish ES again")
    ok = isinstance(done, dict) and done.get("iterations") == len(read_history(out / HISTORY, population))
    return done if ok else None


GRPO_DIR = "grpo"
GRPO_JOB = "es-grpo"


def grpo_folder(run_dir: str | Path) -> Path:
    """RUN/es/grpo/: the GRPO-LoRA job trained on ES's kept weights (es.then: grpo)."""
    return Path(run_dir) / ES_DIR / GRPO_DIR


def es_start(run_dir: Path) -> str:
    """The row RUN/es started from (`es.start`: base, baseline or hyper-es)."""
    config = read_json(run_dir / ES_DIR / ES_CONFIG, "delete RUN/es to restart ES")
    return (config.get("es") or {}).get("start", "base")
