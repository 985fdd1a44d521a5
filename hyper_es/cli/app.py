"""The `hyper-es` app, its error boundary and the helpers its commands share."""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Annotated, Optional

import typer

from hyper_es.errors import HyperESError

HELP = ("Post-train an LLM for reasoning: evolution strategies (CMA-ES) over layer-wise merge coefficients of a few "
        "GRPO-LoRA directions, or of LoRA adapters you already have. Start with `hyper-es check RECIPE`, then "
        "`hyper-es run RECIPE --out RUN`; the guide is README.md and docs/.")
app = typer.Typer(add_completion=False, no_args_is_help=True, help=HELP, pretty_exceptions_enable=False)
analyze_app = typer.Typer(no_args_is_help=True, help="Analyses of finished runs: coverage, functional sparsity, scale fit.")
app.add_typer(analyze_app, name="analyze")
logger = logging.getLogger("hyper_es")
# --backend of a command that runs a recipe: unset means the recipe's own.
RecipeBackend = Annotated[Optional[str], typer.Option(help="vllm | hf (default: the recipe's eval.backend)")]


def _fail(msg: str) -> None:
    typer.echo("\n".join(f"error: {line}" for line in msg.splitlines() or ["(no message)"]), err=True)
    raise typer.Exit(2)


def command(*args, group: typer.Typer | None = None, **kwargs):
    """`app.command` inside the one error boundary: a HyperESError (bad recipe, model, data, run folder, engine
    refusal) prints one line per problem and exits 2; anything else is a bug and keeps its traceback."""
    def deco(fn):
        @functools.wraps(fn)
        def guarded(*a, **kw):
            try:
                return fn(*a, **kw)
            except HyperESError as exc:
                _fail(str(exc))

        return (group or app).command(*args, **kwargs)(guarded)

    return deco


def _backend(backend: str | None, *, required: bool = False) -> None:
    if (backend is not None or required) and backend not in ("vllm", "hf"):
        _fail(f"--backend: expected vllm or hf, got '{backend}'")


def _writable(out: Path, *, folder: bool, opt: str = "--out") -> Path:
    """An output path a command may write: a folder (new or existing) or a file (new or existing), refused up front
    where the other kind already stands, before any work that would be lost."""
    if folder and out.exists() and not out.is_dir():
        _fail(f"{opt} {out}: exists and is not a folder; expected a folder (new, or one this command wrote)")
    if not folder and out.is_dir():
        _fail(f"{opt} {out}: is a folder; expected a file path")
    return out


def _ints(text: str, opt: str, minimum: int = 1) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        vals = ()
    if not vals or min(vals) < minimum:
        kind, like = ("positive integers", "1,8") if minimum == 1 else ("integers from 0", "0,1,2")
        _fail(f"{opt}: expected comma-separated {kind} like {like}; got '{text}'")
    return vals


@app.callback()
def main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="debug logging")] = False) -> None:
    from hyper_es.distributed.child import unwind_on_sigterm
    from hyper_es.progress import setup_logging

    setup_logging(verbose)
    # SIGTERM unwinds like Ctrl-C, so engines and child processes are shut down (vLLM's EngineCore would otherwise
    # outlive us) and stages stop between atomic writes; a re-run resumes.
    unwind_on_sigterm()
