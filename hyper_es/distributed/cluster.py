"""Joining a Ray cluster, or starting a local one, for the length of one stage."""

from __future__ import annotations

import os
import socket
import sys
from contextlib import contextmanager

from hyper_es.errors import ConfigError


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """One clear line when nothing listens at host:port (Ray's own connect retries for a minute)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"executor.address: expected host:port (or auto), got '{address}'")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        raise ConfigError(f"executor.address: cannot reach a Ray cluster at {address} ({exc.strerror or exc}); "
                          f"start one with `ray start --head`, or leave address empty for a local cluster") from None


def worker_env(threads: int = 1) -> dict:
    """The runtime_env of our tasks and actors: workers import what the driver imports (user rewards on its
    path), with the recipe's thread count and the project's cache and data folders."""
    path = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    env = {"OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": path}
    for key in ("HF_HOME", "HYPER_ES_CACHE", "HYPER_ES_DATA", "HYPER_ES_ARCHITECTURES"):
        if key in os.environ:
            env[key] = os.environ[key]
    return {"env_vars": env}


def cuda_present() -> bool:
    """Whether this driver sees a CUDA device (the one probe of the GPU refusals below; tests replace it)."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and torch.cuda.device_count() > 0


def gpu_share() -> float:
    """The part of its GPU this process holds: a Ray task's or actor's fractional num_gpus (0.5: two per GPU), which
    sees the whole card; 1 otherwise. Memory plans size a stage to this part of the card."""
    if "ray" not in sys.modules:
        return 1.0
    import ray

    if not ray.is_initialized() or ray.get_runtime_context().worker.mode != ray.WORKER_MODE:  # not in a task/actor
        return 1.0
    gpus = ray.get_runtime_context().get_assigned_resources().get("GPU", 0)
    return gpus if 0 < gpus < 1 else 1.0


def require_gpus(field: str, num_gpus: float, what: str) -> None:
    """Refuse `what` asked for with `field` = 0 on a machine with CUDA: Ray (2.60) leaves CUDA_VISIBLE_DEVICES alone
    for a task or actor of num_gpus=0, so every one of them would land on GPU 0. Call it before Ray starts."""
    if num_gpus == 0 and cuda_present():
        raise ConfigError(f"{field}: 0 on a machine with CUDA GPUs, so Ray would put every {what} on GPU 0; set "
                          f"{field} to the GPUs each one uses (1 for one per GPU, 0.5 for two per GPU)")


@contextmanager
def ray_cluster(executor, threads: int = 1):
    """Ray for the length of a stage: joins `executor.address`, or starts a local cluster of `executor.num_cpus`
    CPUs, and disconnects (stopping a cluster it started) at the end. A driver already connected is reused."""
    import ray

    if ray.is_initialized():
        yield ray
        return
    address = executor.address
    if address and address != "auto":
        check_reachable(address)
    env = worker_env(threads)
    ray.init(address=address, num_cpus=None if address else executor.num_cpus, include_dashboard=False,
             runtime_env=env, logging_level="WARNING")
    try:
        yield ray
    finally:
        ray.shutdown()
