"""vLLM's engine processes die with their driver, SIGKILL included.

vLLM runs an engine's EngineCore in a process spawned by the driver (the process that builds `vllm.LLM`), and its
Worker in a process spawned by the EngineCore (on GPU with one device the worker may live inside the EngineCore).
On CPU, VLLMGenerator keeps the EngineCore in the driver, so the Worker is the driver's child. A SIGTERM of the
driver shuts them down (`VLLMGenerator.close`), but after a SIGKILL nothing tells the processes left: the Worker
only watches its parent's pipe, and an EngineCore, re-parented, keeps waiting for requests.

So the driver names itself in an environment variable while it starts an engine (`launching()`), and every
worker that imports this module (our worker extensions do; vLLM imports them in the worker) runs a watchdog
thread. It finds the engine's processes: itself and its ancestors up to the driver. When the driver is gone (its
direct child has been re-parented), it kills them, the EngineCore first, then itself. It also kills at once when
the driver died before the worker started. Limit: a driver killed in the first seconds of a start, before the
EngineCore's handshake with it, leaves an EngineCore that gives up by itself after vLLM's 5-minute handshake
timeout, since none of our code runs there yet.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from contextlib import contextmanager

logger = logging.getLogger(__name__)
ENV = "HYPER_ES_ENGINE_DRIVER"  # "pid:create_time" of the driver, set only while it starts an engine
EXTENSION = f"{__name__}.Lifeline"
POLL_S = 0.5
_armed_in: int | None = None


class Lifeline:
    """An empty vLLM worker extension: naming it makes vLLM import this module in the worker, which arms the
    watchdog. Engines with their own extension (HyperESWorker) import this module instead."""


@contextmanager
def launching():
    """Engine processes started inside this block die with this process."""
    import psutil

    old = os.environ.get(ENV)
    os.environ[ENV] = f"{os.getpid()}:{psutil.Process().create_time()!r}"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = old


def engine_chain(driver: int, created: float):
    """(this process and its ancestors below the driver, whether the driver is still their ancestor).

    Every process of an engine was started after its driver; the first ancestor older than the driver is the
    process that adopted the engine after the driver died (init, or a subreaper), never part of the engine."""
    import psutil

    chain = [psutil.Process()]
    while True:
        parent = chain[-1].parent()
        if parent is None:
            return chain, False
        born = parent.create_time()
        if parent.pid == driver and abs(born - created) < 0.01:
            return chain, True
        if born < created:
            return chain, False
        chain.append(parent)


def _kill(chain) -> None:
    import psutil

    for p in reversed(chain[1:]):  # the EngineCore first, then this process
        try:
            p.kill()  # psutil checks the process's identity first (no pid reuse)
        except psutil.Error:
            pass
    os.kill(os.getpid(), signal.SIGKILL)


def _watch(chain, driver: int) -> None:
    import psutil

    top = chain[-1]  # the driver's direct child: re-parented as soon as the driver exits
    while True:
        time.sleep(POLL_S)
        try:
            if top.ppid() == driver:
                continue
        except psutil.Error:
            pass  # the EngineCore is gone: vLLM's own death pipe ends the worker anyway
        logger.warning("the driver (pid %d) is gone: stopping this engine (pids %s)", driver,
                       ", ".join(str(p.pid) for p in reversed(chain)))
        _kill(chain)


def arm() -> None:
    """Start the watchdog in this process if an engine driver named itself (once per process)."""
    global _armed_in
    spec = os.environ.get(ENV)
    if not spec or _armed_in == os.getpid():
        return
    _armed_in = os.getpid()
    try:
        pid, created = spec.split(":", 1)
        chain, alive = engine_chain(int(pid), float(created))
    except Exception as exc:  # no psutil, or an odd value: run without the watchdog, as vLLM does
        logger.warning("engine watchdog not armed (%s=%r): %s", ENV, spec, exc)
        return
    if not alive:
        logger.warning("the driver (pid %s) died while this engine started: stopping it (pids %s)", pid,
                       ", ".join(str(p.pid) for p in reversed(chain)))
        _kill(chain)
    threading.Thread(target=_watch, args=(chain, int(pid)), name="hyper-es-lifeline", daemon=True).start()


arm()
