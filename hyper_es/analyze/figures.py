"""Figures without pyplot: no backend is switched under a notebook, and nothing global is left open."""

from __future__ import annotations

from pathlib import Path


def subplots(rows: int, cols: int, *, figsize, squeeze: bool = True):
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    return fig, fig.subplots(rows, cols, squeeze=squeeze)


def save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path
