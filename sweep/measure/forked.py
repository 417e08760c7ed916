"""The study's side of the fork server (``sweep.measure.forkserver``): start one per
environment, ask it for a child (``spawn``), follow that child as ``subprocess.Popen`` shows one
(``ForkedProc``), end every server (``close_all``).

A server that dies (killed, say) is started again, ``MAX_RESTARTS`` times in a process, and says
so on stderr; a child it took with it is reported as lost (``ForkedProc.server_lost``), not as
the child's failure: ``child.launch`` starts it again. A child's ``exit`` message lost to an
interrupt is read from ``/proc`` instead, so a wait after a kill always ends.
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
import time

from ..common.env import REPO
from ..common.interrupts import interrupts_allowed
from .parent import die_with_parent

# the server's module; it lives apart from this one, which the package imports: run as
# ``python -m`` it is then loaded once, as ``__main__`` (else runpy warns that it was imported first)
MODULE = "sweep.measure.forkserver"
FORKABLE = ("sweep.measure.trial", "sweep.measure.ceilings", "sweep.measure.calibration_run")

START_TIMEOUT_S = 300.0  # the server's imports; past it, children start as new interpreters
REPLY_TIMEOUT_S = 60.0  # a request's answer (a pid) from a server that has started
MAX_SERVERS = 2  # environments served at once in one process
MAX_RESTARTS = 2  # servers started again after one died, in one process
_KEEP = ("DESIGNZOO_PARENT_PID",)  # set by the child itself, not read at import
# the server's own imports start no thread (a fork copies the caller alone, and Python 3.12 warns
# on forking a process that has others): numpy's OpenBLAS starts a pool of one thread per core
# more at import, pyarrow's jemalloc (through pandas) a background thread. Its children run in
# the environment they ask for; these set only how the server's libraries started.
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "JE_ARROW_MALLOC_CONF": "background_thread:false"}
_servers: dict = {}  # environment key -> Server
_restarts = 0
_lock = threading.Lock()


class ForkedProc:
    """A forked child as ``subprocess.Popen`` shows one to ``child.Child``: ``pid``,
    ``stdout`` (text, line-buffered), ``poll``, ``wait(timeout)`` (raises
    ``subprocess.TimeoutExpired``), ``send_signal``, ``returncode``. Until its exit is read the
    server keeps it unreaped, so its pid (and group) is never another process's."""

    def __init__(self, args: list[str], pid: int, own: socket.socket, stdout):
        self.args, self.pid, self._own, self.stdout = args, pid, own, stdout
        self.returncode: int | None = None
        self.server_lost = False  # the server died under it (and took it: PR_SET_PDEATHSIG)
        self._lock = threading.Lock()

    def _read(self, timeout: float | None) -> int | None:
        with self._lock:
            if self.returncode is not None:
                return self.returncode
            end = None if timeout is None else time.monotonic() + timeout
            while True:  # in slices: a lost message is found by _zombie
                self._own.settimeout(0.5 if end is None else
                                     max(0.0, min(0.5, end - time.monotonic())))
                try:
                    msg = self._own.recv(64)
                    break
                except (TimeoutError, BlockingIOError):  # a timeout of 0: the latter
                    if (rc := self._zombie()) is not None:
                        msg = f"exit {rc}".encode()
                        break
                    if end is not None and time.monotonic() >= end:
                        return None  # still running
                except OSError:
                    msg = b""
                    break
            try:
                self.server_lost = not msg.startswith(b"exit ")
                if self.server_lost:  # its own children too (the server's drop would have)
                    try:
                        os.killpg(self.pid, signal.SIGKILL)
                    except OSError:
                        pass
                self.returncode = -signal.SIGKILL if self.server_lost else int(msg.split()[1])
            finally:
                self._own.close()  # the server reaps it now
            return self.returncode

    def _zombie(self) -> int | None:
        """The exit code of a child that has exited, every thread, and waits to be reaped
        (``/proc/PID/stat``: state ``Z`` with one thread left, field 20; field 52 its wait
        status), else None. Its ``exit`` message can be lost: an interrupt that lands between
        the message's arrival and its reading."""
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        if fields[0] != "Z" or fields[17] != "1":  # (a leader gone before its other threads)
            return None
        return os.waitstatus_to_exitcode(int(fields[49]))

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
            env={**ONE_THREAD, **env}, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,  # its stderr: ours
            pass_fds=[theirs.fileno()], start_new_session=True, preexec_fn=die_with_parent)
        try:  # in slices, a signal let through (a study's trial loop holds them elsewhere)
            theirs.close()
            end = time.monotonic() + START_TIMEOUT_S
            with interrupts_allowed():
                said = ""
                while not said and time.monotonic() < end:
                    ours.settimeout(0.5)
                    try:
                        said = ours.recv(4096).decode() or "refused: the server exited"
                    except TimeoutError:
                        pass
            said = said or f"refused: not ready after {START_TIMEOUT_S:g} s"
        except OSError as exc:
            said = f"refused: {type(exc).__name__} {exc}"
        except BaseException:  # Ctrl-C while it imports: it goes with us, now
            self.ctl.close()
            self.proc.kill()
            self.proc.wait()
            raise
        ours.settimeout(REPLY_TIMEOUT_S)
        self.ready = said == "ready"
        self.why = "" if self.ready else said
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
    global _restarts
    with _lock:
        key = _key(env)
        srv = _servers.pop(key, None)
        if srv is not None and srv.ready and srv.proc.poll() is not None:
            srv.close()  # it died (killed, say): a new one, MAX_RESTARTS times in a process
            if _restarts < MAX_RESTARTS:
                _restarts += 1
                print(f"fork server: exited with {srv.proc.returncode}; a new one starts",
                      file=sys.stderr)
                srv = None
            else:
                srv.ready, srv.why = False, "exited again"
                print("fork server: exited again; measurement children start as new "
                      "interpreters", file=sys.stderr)
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
            try:  # a server that died: the next call starts another
                srv.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:  # alive but not answering: not asked again
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
