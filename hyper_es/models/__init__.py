"""Model loading: HF ids, local folders and offline built-ins, all resolved to a local HF folder."""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from hyper_es.errors import HyperESError
from hyper_es.models import smollm2, tiny
from hyper_es.rundir import ADAPTER_CONFIG, ADAPTER_WEIGHTS

logger = logging.getLogger(__name__)

BUILTINS: dict[str, Callable[[Path], Path]] = {
    "tiny-random": tiny.build,
    "smollm2-135m-instruct": smollm2.build,
}
_BUILD_VERSION = "1"  # bump to invalidate cached built-in folders
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


class ModelNotFoundError(HyperESError, FileNotFoundError):
    """The model is neither a built-in, a local folder, nor reachable on the hub."""


def cache_dir() -> Path:
    """Where built-in models are cached: $HYPER_ES_CACHE, else $XDG_CACHE_HOME/hyper-es, else ~/.cache/hyper-es."""
    if os.environ.get("HYPER_ES_CACHE"):
        return Path(os.environ["HYPER_ES_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "hyper-es"


def _build_builtin(name: str) -> Path:
    out = cache_dir() / "models" / f"{name}-v{_BUILD_VERSION}"
    if (out / "config.json").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    _atomic_build(out, BUILTINS[name])
    return out


def _atomic_build(out: Path, build: Callable[[Path], object]) -> None:
    """Build into a temporary sibling folder, then rename: a half-built folder is never seen as finished."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        build(tmp)
        try:
            tmp.rename(out)
        except OSError:
            if not (out / "config.json").is_file():  # lost a race only if the winner finished
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def resolve(name: str, *, revision: str | None = None) -> Path:
    """Return a local folder for `name`: a built-in, an existing folder, or an HF hub id (cache first)."""
    if name in BUILTINS:
        return _build_builtin(name)
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(f"model folder {path} has no config.json (expected a save_pretrained folder)")
        return path
    if not HUB_ID.fullmatch(name):  # (not Path.suffix: "Qwen2.5-0.5B-Instruct" has one)
        raise ModelNotFoundError(
            f"model '{name}': no such folder, and not a built-in ({', '.join(BUILTINS)}) or a hub id 'org/name'"
        )
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(name, revision=revision, local_files_only=True))
    except Exception:
        pass
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    if offline:
        raise ModelNotFoundError(f"model '{name}' is not in the local HF cache and HF_HUB_OFFLINE is set")
    logger.info("downloading %s from the hub", name)
    try:
        return Path(snapshot_download(name, revision=revision))
    except Exception as exc:
        raise ModelNotFoundError(
            f"model '{name}' is not cached locally and the hub could not be reached to download it "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}). Use a local folder or a built-in "
            f"({', '.join(BUILTINS)})."
        ) from None


def default_device() -> str:
    """Where an HF engine runs: the GPU when torch sees one, else the CPU."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def load(name: str, *, dtype: str = "float32", revision: str | None = None, trust_remote_code: bool = False,
         device: str = "cpu"):
    """Load (model, tokenizer) with transformers from a resolved local folder, onto `device`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve(name, revision=revision)
    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=getattr(torch, dtype), trust_remote_code=trust_remote_code
    )
    model.to(device).eval()
    return model, tok


def names_base(named: str | None, name: str) -> bool:
    """Whether an adapter config's `base_model_name_or_path` names the model `name` (a hub id or a folder of it; an
    unnamed base is taken as this one)."""
    return not named or Path(str(named)).name in (Path(name).name, resolve(name).name)


def check_adapter(adapter: str | Path, name: str) -> tuple[Path, Path]:
    """A PEFT adapter folder's config and weights (one line naming what is missing); logs once when its config names
    a base other than `name` (an adapter of the same shapes loads silently otherwise)."""
    import json

    adapter = Path(adapter)
    config, weights = adapter / ADAPTER_CONFIG, adapter / ADAPTER_WEIGHTS
    for path in (config, weights):
        if not path.is_file():
            raise ModelNotFoundError(f"adapter {adapter}: no {path.name} (expected a PEFT adapter folder)")
    try:
        named = json.loads(config.read_text()).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError):
        raise ModelNotFoundError(f"{config}: not a JSON object (expected a PEFT adapter config)") from None
    if not names_base(named, name):
        logger.warning("adapter %s: its config names the base %s, not %s; the shapes fit, so it is used as given",
                       adapter, named, name)
    return config, weights


def with_adapter(name: str, adapter: str | Path, *, revision: str | None = None) -> Path:
    """A cached save_pretrained folder of `name` with a PEFT LoRA adapter merged in (for vLLM, which on CPU runs
    LoRA 8-9x slower than merged weights). Keyed by the adapter's weights hash."""
    import hashlib

    adapter = Path(adapter)
    config, weights = check_adapter(adapter, name)
    key = hashlib.sha256(weights.read_bytes() + config.read_bytes()).hexdigest()[:16]
    out = cache_dir() / "merged" / f"{Path(name).name}-{key}"
    if (out / "config.json").is_file():
        return out

    def build(tmp: Path) -> None:
        from peft import PeftModel

        model, tok = load(name, revision=revision)
        try:
            peft_model = PeftModel.from_pretrained(model, str(adapter))
        except RuntimeError as exc:  # torch's "size mismatch for ...", one block per tensor
            first = next((ln.strip() for ln in str(exc).splitlines() if "size mismatch" in ln), str(exc)[:200])
            raise HyperESError(f"adapter {adapter}: its tensors do not fit {name} ({first}); expected an adapter "
                               f"trained on this base") from None
        peft_model.merge_and_unload().save_pretrained(tmp)
        tok.save_pretrained(tmp)

    out.parent.mkdir(parents=True, exist_ok=True)
    _atomic_build(out, build)
    return out
