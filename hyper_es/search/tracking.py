"""Where the search's per-generation numbers go besides the JSONL log: a rich progress bar on a terminal,
TensorBoard event files (RUN/search/tensorboard) if `tensorboard` is installed, and W&B if chosen and installed."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

logger = logging.getLogger(__name__)
SCALARS = ("best", "mean", "median", "sigma", "tokens", "merge_load_s", "generate_s", "score_s", "seconds",
           "fidelity_max", "fidelity_mean")


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


class Tracker:
    def __init__(self, out: Path, *, kind: str, total_candidates: int, done_candidates: int, config: dict):
        self.tb = self.wandb = self.bar = None
        if kind in ("auto", "tensorboard") and _installed("tensorboard"):
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(out / "tensorboard"))
        elif kind == "tensorboard":
            logger.warning("search.tracking: tensorboard is not installed (pip install tensorboard); not logging")
        if kind == "wandb":
            if _installed("wandb"):
                import wandb

                self.wandb = wandb.init(project="hyper-es", dir=str(out), config=config, resume="allow")
            else:
                logger.warning("search.tracking: wandb is not installed (pip install wandb); not logging to W&B")
        if sys.stderr.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("search"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                TextColumn("{task.description}"), transient=True)
            self.task = self.bar.add_task("", total=total_candidates, completed=done_candidates)
            self.bar.start()

    def candidate_done(self) -> None:
        if self.bar:
            self.bar.advance(self.task)

    def generation(self, record: dict) -> None:
        step = record["generation"]
        val = max((v["val"] for v in record.get("val", [])), default=None)
        if self.bar:
            self.bar.update(self.task, description=f"gen {step}: best {record['best']:.3f} mean {record['mean']:.3f} "
                            f"σ {record['sigma']:.3f}" + (f" val {val:.3f}" if val is not None else ""))
        metrics = {k: record[k] for k in SCALARS if k in record}
        if val is not None:
            metrics["val_best"] = val
        if self.tb:
            for k, v in metrics.items():
                self.tb.add_scalar(f"search/{k}", v, step)
            self.tb.flush()
        if self.wandb:
            self.wandb.log({f"search/{k}": v for k, v in metrics.items()}, step=step)

    def close(self) -> None:
        if self.bar:
            self.bar.stop()
        if self.tb:
            self.tb.close()
        if self.wandb:
            self.wandb.finish()
