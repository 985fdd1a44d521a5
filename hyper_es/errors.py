"""User-facing errors: the CLI prints their message on one line (per problem) without a traceback."""


class HyperESError(Exception):
    """Base class for errors caused by the user's input, not by a bug."""


class RecipeError(HyperESError, ValueError):
    """A recipe file is missing, unreadable or invalid."""


class DataError(HyperESError, ValueError):
    """A task's data cannot be loaded or lacks a field the prompt or reward needs."""


class ConfigError(HyperESError, ValueError):
    """Settings passed on the command line or to the API are inconsistent (e.g. Pass@k with fewer samples)."""
