"""Full-parameter evolution strategies (issue 12): seeded per-tensor noise, reward normalisation, σ schedules, and
the update θ ← θ + α/(Nσ)·Σ zᵢ·εᵢ, applied in place and replayable from (seeds, normalised rewards)."""

from hyper_es.es.noise import member_seeds, noise, tensor_seed
from hyper_es.es.schedule import sigma_at
from hyper_es.es.update import apply_update, normalise, perturb

__all__ = ["apply_update", "member_seeds", "noise", "normalise", "perturb", "sigma_at", "tensor_seed"]
