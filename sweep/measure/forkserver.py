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
starts another server. Protocol, over ``SOCK_SEQPACKET`` socket pairs: the client sends
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
REPLY_TIMEOUT_S = 60.0  # a request's answer (a pid) from a server that has started
MAX_SERVERS = 2  # environments served at once in one process
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
        os.environ.update(req["env"])
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


# ---- the client -------------------------------------------------------------------------------

class ForkedProc:
    """A forked child as ``subprocess.Popen`` shows one to ``child.Child``: ``pid``,
    ``stdout`` (text, line-buffered), ``poll``, ``wait(timeout)`` (raises
    ``subprocess.TimeoutExpired``), ``send_signal``, ``returncode``. Until its exit is read the
    server keeps it unreaped, so its pid (and group) is never another process's."""

    def __init__(self, args: list[str], pid: int, own: socket.socket, stdout):
        self.args, self.pid, self._own, self.stdout = args, pid, own, stdout
        self.returncode: int | None = None
        self._lock = threading.Lock()

    def _read(self, timeout: float | None) -> int | None:
        with self._lock:
            if self.returncode is not None:
                return self.returncode
            self._own.settimeout(timeout)
            try:
                msg = self._own.recv(64)
            except (TimeoutError, BlockingIOError):  # still running (a timeout of 0: the latter)
                return None
            except OSError:
                msg = b""
            # no message: the server died, and its children with it (PR_SET_PDEATHSIG)
            self.returncode = int(msg.split()[1]) if msg.startswith(b"exit ") else -signal.SIGKILL
            self._own.close()  # the server reaps it now
            return self.returncode

    def poll(self) -> int | None:
        """The exit code, or None while the child runs."""
        return self._read(0)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit (``timeout`` s; None: no limit) and return its code.

        Raises:
            subprocess.TimeoutExpired: still running after ``timeout`` s.
        """
        if (rc := self._read(timeout)) is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return rc

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
        self.ctl = ours
        self.proc = subprocess.Popen(
            [sys.executable, "-m", MODULE, str(theirs.fileno()), str(os.getpid())], cwd=REPO,
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=[theirs.fileno()], start_new_session=True, preexec_fn=die_with_parent)
        theirs.close()
        ours.settimeout(START_TIMEOUT_S)
        try:
            said = ours.recv(4096).decode()
        except OSError as exc:  # a timeout among them
            said = f"refused: {type(exc).__name__} {exc}"
        except BaseException:  # Ctrl-C while it imports: it goes with us
            self.close()
            raise
        ours.settimeout(REPLY_TIMEOUT_S)
        self.ready = said == "ready"
        self.why = "" if self.ready else (said or "refused: the server exited")
        if not self.ready:
            self.close()

    def spawn(self, args: list[str], env: dict) -> ForkedProc:
        """Fork the child of the command ``args`` (``python -m MODULE ARGV...``) in ``env``.

        Raises:
            OSError: the server is gone or did not answer (the caller starts the child as
                before); KeyboardInterrupt: a signal, the child (if forked) ended first.
        """
        r, w = os.pipe()
        own, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            try:
                msg = json.dumps({"module": args[2], "argv": args[3:], "env": env,
                                  "cwd": str(REPO)}).encode()
                socket.send_fds(self.ctl, [msg], [w, theirs.fileno()])
            finally:
                os.close(w)
                theirs.close()
            own.settimeout(REPLY_TIMEOUT_S)
            said = own.recv(64)
            if not said.startswith(b"pid "):
                raise OSError("the fork server did not fork the child")
        except BaseException:  # our socket closed: the server kills a child it forked
            os.close(r)
            own.close()
            raise
        return ForkedProc(args, int(said.split()[1]), own, open(r, buffering=1, errors="replace"))

    def close(self) -> None:
        """End the server (its running children killed) and wait for it."""
        try:
            self.ctl.close()
        finally:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _key(env: dict) -> tuple:  # an environment as the server reads it
    return tuple(sorted((k, v) for k, v in env.items() if k not in _KEEP))


def forkable(cmd: list[str]) -> bool:
    """Whether ``cmd`` is ``python -m MODULE ...`` of a module in ``FORKABLE`` (no wrapper such
    as ``ncu``), which the fork server can start, on Linux."""
    return (sys.platform.startswith("linux") and len(cmd) >= 3 and cmd[0] == sys.executable
            and cmd[1] == "-m" and cmd[2] in FORKABLE)


def spawn(cmd: list[str], env: dict) -> ForkedProc | None:
    """The child ``cmd`` (``forkable``) forked by this process's server for ``env`` (started on
    first use; past ``MAX_SERVERS`` environments the least recently used server is ended), or
    None where no server serves (it refused, or died): the caller starts ``cmd``."""
    with _lock:
        key = _key(env)
        srv = _servers.pop(key, None)
        if srv is None:
            while len(_servers) >= MAX_SERVERS:  # e.g. a profiler's per-design environment
                old = _servers.pop(next(iter(_servers)))
                if old.ready:
                    old.close()
            srv = Server(env)
            if not srv.ready:
                print(f"fork server: {srv.why}; measurement children start as new interpreters",
                      file=sys.stderr)
        _servers[key] = srv  # the most recently used last
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
