"""`hyper-es` command line: `app` (the Typer app and its error boundary), and the commands it gathers by stage
(`stages`), export (`export`), analysis (`analyze`) and comparisons (`compare`). Importing a module registers its commands, in help order."""

from hyper_es.cli import stages  # noqa: F401
from hyper_es.cli import export  # noqa: F401
from hyper_es.cli import analyze  # noqa: F401
from hyper_es.cli import compare  # noqa: F401
from hyper_es.cli.app import app

__all__ = ["app"]
