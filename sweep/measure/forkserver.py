"""Measurement children forked from a process that has imported torch, triton and the zoo once.

``python -m sweep.measure.trial`` (and the ceilings and calibration children) spends its first
seconds importing: on a 2-core CI machine about 3 s of a CPU test's trial, on an H100 host about
4 s of each design's (the main job's trials: "other" 5 s -> 1 s, the job 97.9 s -> 77.3 s,
``results/reference/fresh_h100.md``). The fork server is one process per study process (and
environment) that imports them once; each such child is forked from it and starts in
milliseconds. The child is still the unit of isolation it was: a process of its own, in a process
group of its own (killed whole at a timeout), with its own exit code (subprocess's convention:
``-N`` for signal N), its output on a pipe the caller pumps, and ``DESIGNZOO_PARENT_PID``
(``parent.watch_parent``) naming the study process.

CUDA is never initialized before a fork (a driver initialized in a parent is unusable in a
forked child): after its imports the server checks that ``cuInit`` has not run in it, and refuses
to serve if it has; the caller then starts the child as a new interpreter, as before.

A server serves one environment (torch, triton and ``zoo.nvtx`` read theirs at import); another
starts another server. The study's side (``spawn``, ``close_all``, a forked child as
``subprocess.Popen`` shows one) is ``sweep.measure.forked``. Protocol, over ``SOCK_SEQPACKET``
socket pairs: the client sends
``{"module", "argv", "env", "cwd"}`` as JSON with two descriptors (``SCM_RIGHTS``), the write end
of the child's output pipe and one end of the child's own socket pair, on which the server writes
``pid N`` (the process group made) and ``exit RC`` (the child then left unreaped until the client
closes its end).
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import sys
import threading

from .forked import FORKABLE
from .parent import die_with_parent

PRELOAD = ("torch", "triton", "pandas", "zoo", "kernels.decode_linear", "kernels.tuning",
           "zoo.weights", "sweep.measure.timing", "sweep.measure.moe_routing", *FORKABLE)


def _cuda_initialized() -> bool:
    """Whether this process has initialized the CUDA driver (``cuInit``). Loading ``libcuda``
    is not that (torch's CUDA builds load it at import): a driver call that needs ``cuInit``
    (``cuCtxGetCurrent``) answers ``CUDA_ERROR_NOT_INITIALIZED`` (3) until it has run."""
    try:
        with open("/proc/self/maps") as f:
            if not any("libcuda.so" in line for line in f):
                return False
        import ctypes

        ctx = ctypes.c_void_p()
        return ctypes.CDLL("libcuda.so.1").cuCtxGetCurrent(ctypes.byref(ctx)) != 3
    except (OSError, AttributeError):
        return True  # cannot tell: do not fork


# ---- the server -------------------------------------------------------------------------------

def _exit_code(code) -> int:
    """An interpreter's exit code for ``main``'s return or ``SystemExit``'s: None 0, an int itself,
    anything else printed to stderr and 1."""
    if code is None or isinstance(code, int):
        return (code or 0) & 0xFF
    print(code, file=sys.stderr)
    return 1


def _child(req: dict, out_fd: int, server: int, keep: list) -> None:
    """In the forked child: become ``python -m MODULE ARGV`` of ``req`` and exit with its code
    (an uncaught Ctrl-C as SIGINT, as an interpreter ends then)."""
    code, interrupted = 1, False
    try:
        os.setpgid(0, 0)  # both sides set the group: whichever runs first
        die_with_parent()  # the server's death ends it (watch_parent: the study's)
        if os.getppid() != server:  # the server died before the line above
            os._exit(137)
        for s in keep:
            s.close()
        for sig in (signal.SIGTERM, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        null = os.open(os.devnull, os.O_RDONLY)
        for fd, to in ((null, 0), (out_fd, 1), (out_fd, 2)):
            os.dup2(fd, to)
        os.close(out_fd)
        os.close(null)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"], DESIGNZOO_FORKED="1")  # (its peak RSS reads lower)
        argv = req["argv"]
        # held open for the child's life: /proc/PID/fd names its first argument, a trial's spec
        # (its command line is the server's), so the process of a test's folder can be found
        try:
            os.open(argv[0], os.O_RDONLY)
        except OSError:
            pass  # not there (yet): main says so if it matters
        sys.argv = [req["module"], *argv]
        code = _exit_code(__import__(req["module"], fromlist=["main"]).main(argv))
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except KeyboardInterrupt:
        interrupted = True
    except BaseException:  # noqa: BLE001 - reported as an interpreter would
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            threading._shutdown()  # as an interpreter ends: its threads joined, then atexit
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            if interrupted:
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGINT)
            os._exit(code)


def serve(ctl: socket.socket) -> None:
    """The server's loop on its control socket ``ctl``: fork a child per request, report each
    child's pid and exit code on its own socket. A child that has exited stays a zombie (its pid
    not reused) until the client closes its socket; a running child whose socket the client
    closed is killed; when the client's control end closes, every child is, and this returns."""
    import selectors

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the study handles Ctrl-C, then closes us
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # never auto-reaped: waitid sees each exit
    children: dict[int, socket.socket] = {}  # pid -> its socket; running or not yet reaped
    told: set[int] = set()  # exited, told to the client, left a zombie
    sel = selectors.DefaultSelector()
    sel.register(ctl, selectors.EVENT_READ, None)
    me = os.getpid()

    def drop(pid: int) -> None:  # the client closed the child's socket
        if pid not in told:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
        os.waitpid(pid, 0)
        sel.unregister(children[pid])
        children.pop(pid).close()
        told.discard(pid)

    while True:
        for pid in [p for p in children if p not in told]:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            if info is not None:
                code = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
                told.add(pid)
                try:
                    children[pid].send(f"exit {code}".encode())
                except OSError:
                    pass
        events = sel.select(0.05)
        for key, _ in events:
            if key.data is not None:
                drop(key.data)
        if not any(key.data is None for key, _ in events):
            continue
        try:
            msg, fds, flags, _ = socket.recv_fds(ctl, 1 << 20, 2)
        except OSError:
            msg, fds, flags = b"", [], 0
        if not msg:
            for fd in fds:
                os.close(fd)
            break
        try:
            if len(fds) != 2 or flags & socket.MSG_TRUNC:
                raise ValueError("not a request")
            req = json.loads(msg)
        except ValueError:
            for fd in fds:
                os.close(fd)  # the client's wait for a pid sees its socket close
            continue
        out_fd, own = fds[0], socket.socket(fileno=fds[1])
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(req, out_fd, me, [sel, ctl, own, *children.values()])
        os.close(out_fd)
        try:
            os.setpgid(pid, pid)  # before the client learns the pid: killpg(pid) is never early
        except OSError:
            pass  # the child set it, or has died (waitid tells)
        children[pid] = own
        sel.register(own, selectors.EVENT_READ, pid)
        try:
            own.send(f"pid {pid}".encode())
        except OSError:
            pass
    for pid in list(children):  # the client is gone: so are its children
        drop(pid)


def main(argv: list[str] | None = None) -> int:
    """``python -m sweep.measure.forkserver FD PARENT``: import, check, say ``ready`` (or
    ``refused: WHY``) on the socket ``FD``, serve. ``PARENT`` (the client's pid) is only for
    ``ps``: whose server this is."""
    argv = sys.argv[1:] if argv is None else argv
    ctl = socket.socket(fileno=int(argv[0]))
    die_with_parent()  # one thread only (no watch_parent): a fork copies the caller alone
    import importlib

    try:
        for name in PRELOAD:
            importlib.import_module(name)
    except BaseException as exc:  # noqa: BLE001 - the client starts its children as before
        ctl.send(f"refused: import failed: {type(exc).__name__}: {exc}".encode())
        return 1
    if _cuda_initialized():
        ctl.send(b"refused: the imports initialized CUDA; a forked child could not use it")
        return 1
    ctl.send(b"ready")
    serve(ctl)
    os._exit(0)  # nothing to flush; skips the seconds an interpreter with torch takes to end


if __name__ == "__main__":
    sys.exit(main())
