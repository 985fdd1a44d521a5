"""math-verify in a persistent, killable worker process.

math-verify guards itself with ``signal.alarm`` (main thread only) and can hang in
C code (e.g. ``\\boxed{9^{9^{9^{9}}}}``).  So it runs in a separate interpreter
that imports it once and answers ``(id, gold, prediction)`` requests over a
``multiprocessing.Pipe``.  Calls are serialised by a lock (any thread may call);
each request gets a deadline measured from when it is sent (start-up waits for a
"ready" message first and is not counted).  On timeout the worker is killed and
a fresh one is started lazily by the next call.

The worker is this file run as a script (``python sandbox.py FD``) rather than
``multiprocessing``'s spawn start method: spawn re-imports the parent's
``__main__`` (e.g. a training script importing torch) in the child, which is slow
and runs unguarded top-level code.  Like spawn, it is a fresh exec, so it is
safe with threads/CUDA in the parent.  This module imports only the stdlib.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import subprocess
import sys
import threading
import time
from multiprocessing import Pipe
from multiprocessing.connection import Connection

__all__ = ["DEFAULT_DEADLINE", "shutdown", "verify", "warmup", "worker_pid"]

DEFAULT_DEADLINE = 1.0  # seconds per request, from send to reply
STARTUP_TIMEOUT = 120.0  # seconds to wait for the worker's "ready"
RETRY_AFTER = 10.0  # seconds before retrying a worker that failed to start
INNER_TIMEOUT = 1  # math-verify's own alarm() guard inside the worker (whole seconds)

logger = logging.getLogger(__name__)


class _Worker:
    def __init__(self) -> None:
        self.conn, child = Pipe(duplex=True)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), str(child.fileno())],
                pass_fds=(child.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            self.conn.close()
            raise
        finally:
            child.close()
        conn = self.conn
        try:
            conn.send(list(sys.path))
            if not conn.poll(STARTUP_TIMEOUT) or conn.recv() != "ready":
                raise RuntimeError("math-verify worker did not become ready")
        except BaseException:
            self.kill()
            raise

    def kill(self) -> None:
        self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - kernel did not reap in time
            logger.warning("math-verify worker %d did not exit after SIGKILL", self.proc.pid)
        self.conn.close()

    def close(self) -> None:
        try:
            self.conn.send(None)
            self.proc.wait(timeout=1)
            self.conn.close()
        except (OSError, ValueError, subprocess.TimeoutExpired):
            self.kill()


_lock = threading.Lock()
_worker: _Worker | None = None
_pid = os.getpid()  # owner of _worker; a forked child must start its own
_failed_at = -float("inf")
_ids = itertools.count()


def _reset_after_fork() -> None:
    global _lock, _worker, _pid
    _lock, _worker, _pid = threading.Lock(), None, os.getpid()


os.register_at_fork(after_in_child=_reset_after_fork)


def _ensure() -> _Worker:
    """The live worker for this process, starting one if needed (lock held)."""
    global _worker, _pid, _failed_at
    if _pid != os.getpid():
        _worker, _pid = None, os.getpid()
    if _worker is not None and _worker.proc.poll() is not None:
        logger.warning("math-verify worker exited with %s; restarting", _worker.proc.returncode)
        _worker.conn.close()
        _worker = None
    if _worker is None:
        if time.monotonic() - _failed_at < RETRY_AFTER:
            raise RuntimeError("math-verify worker failed to start recently")
        try:
            _worker = _Worker()
        except Exception:
            _failed_at = time.monotonic()
            raise
        logger.debug("math-verify worker %d ready", _worker.proc.pid)
    return _worker


def warmup() -> None:
    """Start the worker now (imports math-verify) so later calls pay no start-up."""
    with _lock:
        _ensure()


def worker_pid() -> int | None:
    """PID of the live worker, if any (diagnostics/tests)."""
    with _lock:
        w = _worker if _pid == os.getpid() else None
        return w.proc.pid if w is not None and w.proc.poll() is None else None


def verify(reference: str, completion: str, *, deadline: float = DEFAULT_DEADLINE) -> float:
    """1.0 if math-verify says ``completion`` matches ``reference`` (gold parsed as
    ``$\\boxed{reference}$``), else 0.0; 0.0 on timeout or any worker failure."""
    global _worker
    with _lock:
        try:
            w = _ensure()
        except Exception:
            logger.error("math-verify worker unavailable; scoring 0", exc_info=True)
            return 0.0
        rid = next(_ids)
        try:
            w.conn.send((rid, reference, completion))
            if w.conn.poll(deadline):
                got, score = w.conn.recv()
                if got == rid:
                    return float(score)
            logger.info("math-verify timed out after %.2fs; killing worker %d", deadline, w.proc.pid)
        except (OSError, EOFError, ValueError, TypeError):
            logger.warning("math-verify worker %d failed; killing it", w.proc.pid, exc_info=True)
        w.kill()
        _worker = None
        return 0.0


def shutdown() -> None:
    """Stop the worker (also registered with atexit); a later call restarts it."""
    global _worker
    with _lock:
        if _worker is not None and _pid == os.getpid():
            _worker.close()
        _worker = None


atexit.register(shutdown)


# --- worker side --------------------------------------------------------------
def _serve(fd: int) -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    conn = Connection(fd)
    sys.path[:] = conn.recv()
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # timeouts are expected
    from functools import lru_cache

    from math_verify import parse, verify as mv_verify
    from math_verify.errors import TimeoutException

    @lru_cache(maxsize=4096)
    def gold(ref: str) -> list:
        return parse(f"$\\boxed{{{ref}}}$", parsing_timeout=INNER_TIMEOUT) or parse(
            ref, parsing_timeout=INNER_TIMEOUT
        )

    def score(ref: str, pred: str) -> float:
        try:
            g, p = gold(ref), parse(pred, parsing_timeout=INNER_TIMEOUT)
            return float(bool(g and p and mv_verify(g, p, timeout_seconds=INNER_TIMEOUT)))
        except (Exception, TimeoutException):
            return 0.0

    score("\\frac{1}{2}", "so $\\boxed{0.5}$")  # pay first-call costs before "ready"
    conn.send("ready")
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return  # parent went away
        if msg is None:
            return
        rid, ref, pred = msg
        conn.send((rid, score(ref, pred)))


if __name__ == "__main__":
    sys.path.pop(0)  # this file's directory: don't shadow top-level modules
    _serve(int(sys.argv[1]))
