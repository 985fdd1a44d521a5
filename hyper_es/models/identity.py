"""A model's weights identity: sha256 over its safetensors files, cached by (path, size, mtime)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def weights_hash(folder: str | Path) -> str:
    from hyper_es.models import cache_dir

    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder}: no *.safetensors files to hash")
    key = json.dumps([[str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns] for f in files])
    cache = cache_dir() / "hashes" / f"{hashlib.sha256(key.encode()).hexdigest()}.txt"
    if cache.is_file():
        return cache.read_text().strip()
    h = hashlib.sha256()
    for f in files:
        with f.open("rb") as fh:
            while chunk := fh.read(1 << 24):
                h.update(chunk)
    digest = h.hexdigest()
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(".tmp")
    tmp.write_text(digest)
    tmp.replace(cache)
    return digest
