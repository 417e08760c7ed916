"""The fork server (``sweep.measure.forkserver``, the study's side ``sweep.measure.forked``): a
measurement child forked from it behaves as one started as a new interpreter (exit codes, signals,
timeouts, its output, its process group), is found under its test's folder, and dies with the
server; each environment has a server of its own; a server that dies is started again and its
child run again; a child's exit whose message was lost is still read."""

import json
import os
import pathlib
import signal
import sys
import threading
import time

import pytest

from sweep.measure import child, forked, forkserver
from tests.conftest import project_processes

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork server: Linux")


def _trial(tmp_path, fault: str) -> list[str]:
    spec = tmp_path / "trials" / "0001" / "spec.json"
    spec.parent.mkdir(parents=True)
    spec.write_text(json.dumps({"device": "cpu", "fault": fault, "model": {}, "workload": {}}))
    return [sys.executable, "-m", "sweep.measure.trial", str(spec), str(spec.parent / "result.json")]


@pytest.fixture(autouse=True)
def _fresh_servers():
    forked.close_all()
    yield
    forked.close_all()


def test_a_forked_trial_reports_its_exit_code_signal_and_output(tmp_path):
    cmd = _trial(tmp_path, "start:raise")
    assert forked.forkable(cmd) and not forked.forkable(["ncu", *cmd])
    c = child.start(cmd, tmp_path / "log.txt")
    assert isinstance(c.proc, forked.ForkedProc)  # forked, not a new interpreter
    assert c.wait(120) == 1  # main's code for a failed measurement
    res = json.loads((tmp_path / "trials/0001/result.json").read_text())
    assert res["status"] == "error" and "injected fault" in res["error"]
    t0 = time.monotonic()
    crash = child.start(_trial(tmp_path / "b", "start:crash"), tmp_path / "log2.txt")
    assert crash.wait(60) == -9  # SIGKILL, as subprocess reports it
    assert time.monotonic() - t0 < 5  # the server had imported everything: no 3 s start
    missing = [sys.executable, "-m", "sweep.measure.trial", str(tmp_path / "no.json"), "r.json"]
    assert child.launch(missing, tmp_path / "log3.txt", 60) == 1
    assert "FileNotFoundError" in (tmp_path / "log3.txt").read_text()  # stderr in the log


def test_a_forked_child_past_its_time_is_killed_with_its_group_and_was_findable(tmp_path):
    cmd = _trial(tmp_path, "start:hang")
    c = child.start(cmd, tmp_path / "log.txt")
    deadline = time.time() + 60
    while not (found := project_processes(str(tmp_path))) and time.time() < deadline:
        time.sleep(0.1)
    assert [pid for pid, _ in found] == [c.proc.pid]  # by the spec it holds open
    assert "/trials/0001/" in found[0][1]
    with pytest.raises(child.ChildTimeout):
        c.wait(1.0)
    assert c.proc.returncode == -9 and not project_processes(str(tmp_path))


def test_the_server_forks_from_one_thread(tmp_path):
    """Nothing the server imports has started a thread of its own when it forks (numpy's OpenBLAS
    pool, pyarrow's jemalloc background thread: ``forked.ONE_THREAD``)."""
    c = child.start(_trial(tmp_path, "start:raise"), tmp_path / "log.txt")
    assert isinstance(c.proc, forked.ForkedProc) and c.wait(120) == 1
    srv = next(iter(forked._servers.values()))
    names = [(pathlib.Path(f"/proc/{srv.proc.pid}/task") / t / "comm").read_text().strip()
             for t in os.listdir(f"/proc/{srv.proc.pid}/task")]
    assert len(names) == 1, names


def test_closing_the_server_ends_its_children_and_each_environment_has_its_own(tmp_path):
    env = child.child_env()
    c = child.start(_trial(tmp_path, "start:hang"), tmp_path / "log.txt")
    other = child.start(_trial(tmp_path / "b", "start:raise"), tmp_path / "log2.txt",
                        env={"DESIGNZOO_NVTX": "1"})  # read at import: another server
    assert other.wait(120) == 1
    assert len(forked._servers) == 2 and forked._key(env) in forked._servers
    servers = list(forked._servers.values())
    forked.close_all()
    assert c.wait(10) == -9  # the server killed its running child on its way out
    assert all(s.proc.poll() is not None for s in servers)
    assert not project_processes(str(tmp_path))


def test_a_server_that_cannot_serve_leaves_the_child_to_a_new_interpreter(tmp_path, monkeypatch):
    import socket

    # refused: an import fails (here in this process: main returns before it would serve)
    monkeypatch.setattr(forkserver, "PRELOAD", ("no_such_module_here",))
    monkeypatch.setattr(forkserver, "die_with_parent", lambda: None)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    assert forkserver.main([str(theirs.detach()), "0"]) == 1  # (main's socket closes it)
    assert ours.recv(4096).startswith(b"refused: import failed: ModuleNotFoundError")
    monkeypatch.undo()
    # died: a new server starts, MAX_RESTARTS times; then children start as new interpreters
    monkeypatch.setattr(forked, "_restarts", 0)
    for i in range(forked.MAX_RESTARTS + 2):
        c = child.start(_trial(tmp_path / str(i), "start:raise"), tmp_path / f"log{i}.txt")
        assert isinstance(c.proc, forked.ForkedProc) == (i <= forked.MAX_RESTARTS)
        assert c.wait(120) == 1
        if i <= forked.MAX_RESTARTS:
            (srv,) = forked._servers.values()
            srv.proc.kill()
            srv.proc.wait()
    assert not srv.ready and forked._restarts == forked.MAX_RESTARTS


def test_a_child_the_dying_server_took_is_started_again(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(forked, "_restarts", 0)
    hang = child.start(_trial(tmp_path, "start:hang"), tmp_path / "log.txt")
    deadline = time.time() + 60
    while not project_processes(str(tmp_path)):
        assert time.time() < deadline
        time.sleep(0.1)
    (srv,) = forked._servers.values()
    srv.proc.kill()
    assert hang.wait(30) == -9 and hang.proc.server_lost  # lost with its server, not failed

    def kill_server_soon(folder):  # once launch's first child runs
        deadline = time.time() + 60
        while not project_processes(str(folder)) and time.time() < deadline:
            time.sleep(0.1)
        next(iter(forked._servers.values())).proc.kill()

    threading.Thread(target=kill_server_soon, args=(tmp_path / "b",), daemon=True).start()
    with pytest.raises(child.ChildTimeout):  # run again (and hung again), not reported as -9
        child.launch(_trial(tmp_path / "b", "start:hang"), tmp_path / "log2.txt", 15)
    assert "fork server: lost while sweep.measure.trial ran; it starts again" in \
        capsys.readouterr().err
    # its work done (a trial's result written): not run again
    threading.Thread(target=kill_server_soon, args=(tmp_path / "c",), daemon=True).start()
    assert child.launch(_trial(tmp_path / "c", "start:hang"), tmp_path / "log3.txt", 60,
                        done=lambda: True) == -9
    assert "starts again" not in capsys.readouterr().err
    assert not project_processes(str(tmp_path))


def test_an_exit_whose_message_was_lost_is_read_from_proc(tmp_path):
    c = child.start(_trial(tmp_path, "start:raise"), tmp_path / "log.txt")
    c.proc._own.settimeout(120)
    assert c.proc._own.recv(64) == b"exit 1"  # taken as an interrupt would take it, unread
    t0 = time.monotonic()
    assert c.wait(30) == 1 and time.monotonic() - t0 < 5  # the zombie's status
    hang = child.start(_trial(tmp_path / "b", "start:hang"), tmp_path / "log2.txt")
    deadline = time.time() + 60
    while not project_processes(str(tmp_path / "b")):
        assert time.time() < deadline
        time.sleep(0.1)
    os.killpg(hang.proc.pid, signal.SIGKILL)  # as Child.kill does, and its message lost
    hang.proc._own.settimeout(30)
    assert hang.proc._own.recv(64) == b"exit -9"
    waited: list = []  # Child.kill's wait, with no limit, ends (in a thread: a hang fails)
    t = threading.Thread(target=lambda: waited.append(hang.proc.wait()), daemon=True)
    t.start()
    t.join(30)
    assert waited == [-9]
    hang.kill()


def test_exit_codes_pids_and_dropped_children_as_a_new_interpreter_would_have_them(tmp_path):
    assert [forkserver._exit_code(c) for c in (None, 0, 3, -1)] == [0, 0, 3, 255]
    assert forkserver._exit_code("usage: ...") == 1  # printed, as SystemExit("...") is
    # an exited child stays a zombie until its exit is read: its pid is nobody else's
    c = child.start(_trial(tmp_path, "start:raise"), tmp_path / "log.txt")
    deadline = time.time() + 60
    while open(f"/proc/{c.proc.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.time() < deadline
        time.sleep(0.1)
    assert c.wait(10) == 1
    deadline = time.time() + 10
    while (pathlib.Path("/proc") / str(c.proc.pid)).exists() and time.time() < deadline:
        time.sleep(0.05)  # read: reaped
    assert not (pathlib.Path("/proc") / str(c.proc.pid)).exists()
    # a running child whose socket its client dropped is killed by the server
    hang = child.start(_trial(tmp_path / "b", "start:hang"), tmp_path / "log2.txt")
    deadline = time.time() + 30
    while not project_processes(str(tmp_path / "b")):
        assert time.time() < deadline
        time.sleep(0.1)
    hang.proc._own.close()
    deadline = time.time() + 10
    while project_processes(str(tmp_path / "b")) and time.time() < deadline:
        time.sleep(0.1)
    assert not project_processes(str(tmp_path / "b"))


def test_at_most_two_environments_have_a_server(tmp_path):
    for i in range(3):
        c = child.start(_trial(tmp_path / str(i), "start:raise"), tmp_path / f"log{i}.txt",
                        env={"DESIGNZOO_FORK_TEST": str(i)})
        assert isinstance(c.proc, forked.ForkedProc) and c.wait(120) == 1
    assert len(forked._servers) == forked.MAX_SERVERS == 2
    assert [dict(k)["DESIGNZOO_FORK_TEST"] for k in forked._servers] == ["1", "2"]
