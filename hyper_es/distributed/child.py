"""One stage in a fresh child process, so that what it holds goes back when it ends.

An in-process vLLM engine, or a trainer's CUDA memory, is not given back on `del` (an open vLLM issue), so a second
engine in the same process fails vLLM's start check. A child started with "spawn" inherits no CUDA context, engine
or allocator cache; its exit returns all of it. The child dies with its driver (SIGKILL included, on Linux), and a
SIGTERM or Ctrl-C of the driver stops it first.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import traceback

from hyper_es.errors import HyperESError
from hyper_es.progress import setup_logging

logger = logging.getLogger(__name__)
PR_SET_PDEATHSIG = 1  # linux/prctl.h
STOP_GRACE_S = 30.0  # a stopped child's time to close its engines before it is killed
EXIT_GRACE_S = 60.0  # a child that sent its result has this long to exit


class ChildError(RuntimeError):
    """A bug in a child process: the message carries the child's traceback."""


def cuda_present() -> bool:
    """Whether this machine has a CUDA device (the `isolate: auto` probe; creates no CUDA context)."""
    import torch

    return torch.cuda.is_available()


def isolating(mode: str) -> bool:
    """`executor.isolate`: always, never, or auto (when CUDA is present)."""
    return mode == "always" or (mode == "auto" and cuda_present())


def unwind_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C (SystemExit), so engines are shut down and stages stop between atomic writes."""
    signal.signal(signal.SIGTERM, _terminate)


def _terminate(signum, frame) -> None:
    raise SystemExit(128 + signum)


def run_in_child(stage: str, fn, *args, threads: int | None = None, **kwargs):
    """`fn(*args, **kwargs)` in a fresh child process; returns its result. `fn`, its arguments and its result must
    pickle (module-level functions, plain data). A HyperESError in the child is raised here with its message; any
    other exception as a ChildError with the child's traceback; a child that dies without a result, as a
    HyperESError naming `stage`. `threads`: the child's OMP_NUM_THREADS (default: this process's torch threads)."""
    import multiprocessing as mp

    if threads is None and "torch" in sys.modules:
        threads = sys.modules["torch"].get_num_threads()
    root = logging.getLogger()
    level = root.getEffectiveLevel() if root.handlers else None  # the child logs as this process does
    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, os.getpid(), level, threads, fn, args, kwargs),
                       name=f"hyper-es {stage}")  # not daemonic: vLLM starts processes of its own
    proc.start()
    send.close()
    try:
        logger.info("%s: in a child process (pid %d)", stage, proc.pid)
        reply = _wait(recv, proc)
    except BaseException:  # the driver is unwinding (SIGTERM, Ctrl-C): the child stops first
        _stop(proc, stage)
        raise
    finally:
        recv.close()
    proc.join(EXIT_GRACE_S)
    if proc.is_alive():
        logger.warning("%s: child process %d did not exit %.0f s after its reply; stopping it", stage, proc.pid,
                       EXIT_GRACE_S)
        _stop(proc, stage)
    if reply is None:
        code = proc.exitcode
        how = f"killed by {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
        hint = "; out of memory?" if code == -signal.SIGKILL else ""
        raise HyperESError(f"{stage}: its process (pid {proc.pid}) died ({how}{hint}) before it finished; "
                           f"re-running resumes from what is on disk")
    kind, value = reply
    if kind == "ok":
        return value
    if kind == "user":
        cls, message = value
        raise cls(message)
    raise ChildError(f"{stage} failed in its child process (pid {proc.pid}); the child's traceback:\n{value}")


def _wait(recv, proc):
    """The child's reply, or None when it exited without one."""
    from multiprocessing.connection import wait

    wait([recv, proc.sentinel])
    try:
        return recv.recv() if recv.poll() else None
    except EOFError:
        return None


def _stop(proc, stage: str) -> None:
    """SIGTERM the child (it unwinds, closing its engines), then SIGKILL it after STOP_GRACE_S."""
    proc.terminate()
    proc.join(STOP_GRACE_S)
    if proc.is_alive():
        logger.warning("%s: child process %d still runs %.0f s after SIGTERM; killing it", stage, proc.pid,
                       STOP_GRACE_S)
        proc.kill()
        proc.join()


def _die_with(parent: int) -> None:
    """SIGKILL this process when the driver dies (Linux), and exit now if it already has."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the driver died before prctl took effect
        os._exit(1)


def _child(send, parent: int, level: int | None, threads: int | None, fn, args, kwargs) -> None:
    _die_with(parent)
    unwind_on_sigterm()
    if threads:
        os.environ["OMP_NUM_THREADS"] = str(threads)  # before torch is imported by the stage
    if level is not None:
        setup_logging(verbose=level <= logging.DEBUG)
    try:
        reply = ("ok", fn(*args, **kwargs))
    except HyperESError as exc:
        reply = ("user", (type(exc), str(exc)))
    except KeyboardInterrupt:
        raise SystemExit(130) from None  # Ctrl-C reached the driver too; it reports
    except Exception:
        reply = ("bug", traceback.format_exc())
    try:
        send.send(reply)
    except Exception:  # an exception class or result that does not pickle
        kind, value = reply
        send.send(("user", (HyperESError, value[1])) if kind == "user" else ("bug", traceback.format_exc()))
    send.close()
