"""Analyses of finished runs: coverage (Pass@k and which problems each row solves) and functional sparsity."""
