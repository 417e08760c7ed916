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

The server reads an environment only once (torch, triton and ``zoo.nvtx`` read theirs at
import), so a server serves one environment: a request with another starts another server
(``DESIGNZOO_PARENT_PID`` aside, which the child sets for itself).

Protocol, over a ``SOCK_SEQPACKET`` socket pair (one message a request): the client sends
``{"module", "argv", "env", "cwd"}`` as JSON with two descriptors (``SCM_RIGHTS``): the write end of the
child's output pipe and one end of a socket pair of the child's own, on which the server writes
``pid N`` once the child is forked (its process group made) and ``exit RC`` when it reaps it.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading

from ..common.env import REPO
from .parent import die_with_parent

MODULE = "sweep.measure.forkserver"
FORKABLE = ("sweep.measure.trial", "sweep.measure.ceilings", "sweep.measure.calibration_run")
PRELOAD = ("torch", "triton", "pandas", "zoo", "kernels.decode_linear", "kernels.tuning",
           "zoo.weights", "sweep.measure.timing", "sweep.measure.moe_routing", *FORKABLE)
START_TIMEOUT_S = 300.0  # the server's imports; past it, children start as new interpreters
_KEEP = ("DESIGNZOO_PARENT_PID",)  # set by the child itself, not read at import
_servers: dict = {}  # environment key -> Server
_lock = threading.Lock()


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

def _child(req: dict, out_fd: int, keep: list[socket.socket]) -> None:
    """In the forked child: become ``python -m MODULE ARGV`` of ``req`` and exit with its code."""
    code = 1
    try:
        for s in keep:
            s.close()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.close(out_fd)
        os.close(null)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        die_with_parent()  # the server's death ends it (watch_parent: the study's)
        argv = req["argv"]
        # held open for the child's life: /proc/PID/fd names its first argument, a trial's spec
        # (its command line is the server's), so the process of a test's folder can be found
        try:
            os.open(argv[0], os.O_RDONLY)
        except OSError:
            pass  # not there (yet): main says so if it matters
        sys.argv = [req["module"], *argv]
        import importlib

        code = importlib.import_module(req["module"]).main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported as a normal interpreter would
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) and 0 <= code < 256 else 1)


def serve(ctl: socket.socket) -> None:
    """The server's loop on its control socket ``ctl``: fork a child per request, report each
    child's pid and exit code on its own socket; when the client's end closes, kill the children
    still running and return."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the study handles Ctrl-C, then closes us
    children: dict[int, socket.socket] = {}

    def reap(block: bool = False) -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            s = children.pop(pid, None)
            if s is not None:
                try:
                    s.send(f"exit {os.waitstatus_to_exitcode(status)}".encode())
                except OSError:
                    pass
                s.close()

    while True:
        ready, _, _ = select.select([ctl], [], [], 0.05)
        reap()
        if not ready:
            continue
        try:
            msg, fds, _, _ = socket.recv_fds(ctl, 1 << 16, 2)
        except OSError:
            msg, fds = b"", []
        if not msg or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            break
        req = json.loads(msg)
        out_fd, own = fds[0], socket.socket(fileno=fds[1])
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(req, out_fd, [ctl, own, *children.values()])
        os.close(out_fd)
        try:
            os.setpgid(pid, pid)  # before the client learns the pid: killpg(pid) is never early
        except OSError:
            pass
        children[pid] = own
        try:
            own.send(f"pid {pid}".encode())
        except OSError:
            pass
    for pid in list(children):  # the client is gone: so are its children
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    reap(block=True)


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


# ---- the client -------------------------------------------------------------------------------

class ForkedProc:
    """A forked child as ``subprocess.Popen`` shows one to ``child.Child``: ``pid``,
    ``stdout`` (text, line-buffered), ``poll``, ``wait(timeout)`` (raises
    ``subprocess.TimeoutExpired``), ``send_signal``, ``returncode``."""

    def __init__(self, args: list[str], pid: int, own: socket.socket, stdout):
        self.args, self.pid, self._own, self.stdout = args, pid, own, stdout
        self.returncode: int | None = None

    def _read(self, timeout: float | None) -> None:
        if self.returncode is not None:
            return
        ready, _, _ = select.select([self._own], [], [], timeout)
        if not ready:
            return
        try:
            msg = self._own.recv(64)
        except OSError:
            msg = b""
        # no message: the server died, and its children with it (PR_SET_PDEATHSIG)
        self.returncode = int(msg.split()[1]) if msg.startswith(b"exit ") else -signal.SIGKILL
        self._own.close()

    def poll(self) -> int | None:
        """The exit code, or None while the child runs."""
        self._read(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit (``timeout`` s; None: no limit) and return its code.

        Raises:
            subprocess.TimeoutExpired: still running after ``timeout`` s.
        """
        self._read(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """``sig`` to the child alone (not its group), while it runs."""
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass


class Server:
    """A running fork server (``main``) for one environment; ``spawn`` forks a child."""

    def __init__(self, env: dict):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.env = env
        self.proc = subprocess.Popen(
            [sys.executable, "-m", MODULE, str(theirs.fileno()), str(os.getpid())], cwd=REPO,
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=[theirs.fileno()], start_new_session=True, preexec_fn=die_with_parent)
        theirs.close()
        self.ctl = ours
        ours.settimeout(START_TIMEOUT_S)
        try:
            said = ours.recv(4096).decode()
        except OSError as exc:  # socket.timeout among them
            said = f"refused: {type(exc).__name__} {exc}"
        ours.settimeout(None)
        self.ready = said == "ready"
        self.why = "" if self.ready else (said or "refused: the server exited")
        if not self.ready:
            self.close()

    def spawn(self, args: list[str], env: dict) -> ForkedProc:
        """Fork the child of the command ``args`` (``python -m MODULE ARGV...``) in ``env``.

        Raises:
            OSError: the server is gone (the caller starts the child as before).
        """
        r, w = os.pipe()
        own, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            msg = json.dumps({"module": args[2], "argv": args[3:], "env": env,
                              "cwd": str(REPO)}).encode()
            socket.send_fds(self.ctl, [msg], [w, theirs.fileno()])
        except OSError:
            os.close(r)
            own.close()
            raise
        finally:
            os.close(w)
            theirs.close()
        said = own.recv(64)
        if not said.startswith(b"pid "):
            os.close(r)
            own.close()
            raise OSError("the fork server did not fork the child")
        return ForkedProc(args, int(said.split()[1]), own, open(r, buffering=1, errors="replace"))

    def close(self) -> None:
        """End the server (its running children are killed) and wait for it."""
        try:
            self.ctl.close()
        finally:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _key(env: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in env.items() if k not in _KEEP))


def forkable(cmd: list[str]) -> bool:
    """Whether ``cmd`` is ``python -m MODULE ...`` of a module in ``FORKABLE`` (no wrapper such
    as ``ncu``), which the fork server can start, on Linux."""
    return (sys.platform.startswith("linux") and len(cmd) >= 3 and cmd[0] == sys.executable
            and cmd[1] == "-m" and cmd[2] in FORKABLE)


def spawn(cmd: list[str], env: dict) -> ForkedProc | None:
    """The child ``cmd`` (``forkable``) forked by this process's server for ``env`` (started on
    first use), or None where no server serves (it refused, or died): the caller starts ``cmd``."""
    with _lock:
        srv = _servers.get(_key(env))
        if srv is None:
            srv = _servers[_key(env)] = Server(env)
            if not srv.ready:
                print(f"fork server: {srv.why}; measurement children start as new interpreters",
                      file=sys.stderr)
        if not srv.ready:
            return None
        try:
            return srv.spawn(cmd, env)
        except OSError:
            srv.ready = False
            srv.close()
            return None


def close_all() -> None:
    """End every fork server of this process (a study's end; also at exit)."""
    with _lock:
        servers = list(_servers.values())
        _servers.clear()
    for srv in servers:
        if srv.ready:
            srv.close()


atexit.register(close_all)

if __name__ == "__main__":
    sys.exit(main())
