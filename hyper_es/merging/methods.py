"""The merge registry (torch-free, so the recipe schema can list it): method -> (sparsification, sign consensus)."""

METHODS: dict[str, tuple[str | None, bool]] = {
    "dare_ties": ("dare", True),
    "ties": ("magnitude", True),
    "task_arithmetic": (None, False),
    "dare_linear": ("dare", False),
}
