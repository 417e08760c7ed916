"""Where a study lives and how it recovers: the Optuna storage, open/resume, interrupted trials.

The storage is SQLite by default (one worker), a JournalStorage file for several workers on one
host, or any RDB URL (PostgreSQL for several hosts). A trial left RUNNING by a process that died is
marked FAIL (``interrupted``) and its design queued again, so no design is lost: on this host when
its process is gone (``recover_interrupted``), and on an RDB storage from any host when its
worker's heartbeat stopped (Optuna's heartbeat: a running trial beats every ``HEARTBEAT_S``; one
silent for ``GRACE_S`` is failed by the next process that starts a trial, and ``retry_dead``
queues its design again, the new trial naming it in ``retry_of``).
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
import warnings
from pathlib import Path

import optuna
from optuna.trial import TrialState

from .common.atomic import write_json
from .report.labels import metric_name
from .report.tables import cut_off
from .space import make_sampler

HEARTBEAT_S, GRACE_S = 30, 120  # a measured trial's parent beats while its child measures


def retry_dead(study: optuna.Study, t) -> None:
    """Optuna's stale-trial callback: queue the design of trial ``t`` (failed because its worker
    stopped beating) again; the new trial's ``retry_of`` names ``t``."""
    params = t.system_attrs.get("fixed_params", t.params)
    if params:
        study.enqueue_trial(params, skip_if_exists=False, user_attrs={
            "retry_of": t.number, "retry_why": f"its worker stopped beating for {GRACE_S} s"})


def _rdb_storage(url: str, engine_kwargs: dict):
    """An ``RDBStorage`` with the heartbeat (``HEARTBEAT_S``, ``GRACE_S``, ``retry_dead``)."""
    import inspect

    params = inspect.signature(optuna.storages.RDBStorage).parameters
    callback = ("heartbeat_stale_trial_callback" if "heartbeat_stale_trial_callback" in params
                else "failed_trial_callback")  # its name before Optuna 4.x
    with warnings.catch_warnings():  # the heartbeat is experimental in name since Optuna 2.9
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs,
                                          heartbeat_interval=HEARTBEAT_S, grace_period=GRACE_S,
                                          **{callback: retry_dead})


def get_storage(url: str):
    """The Optuna storage for ``url``: a path ending in ``.journal`` or ``journal:PATH`` is a
    ``JournalStorage`` on a ``JournalFileBackend`` (many processes on one host); anything else
    goes to ``optuna.storages.get_storage`` (``sqlite:///...``, ``postgresql://...``).

    Raises:
        RuntimeError: the storage cannot be opened (the message names the URL and the cause).
    """
    try:
        if url.startswith("journal:") or url.endswith(".journal"):
            from optuna.storages.journal import JournalFileBackend, JournalStorage

            path = Path(url.removeprefix("journal:"))
            path.parent.mkdir(parents=True, exist_ok=True)
            return JournalStorage(JournalFileBackend(str(path)))
        kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite:") else {}
        for attempt in range(5):  # another process may be creating the same tables right now
            try:  # (sqlite: writers of several processes wait for the lock)
                return _rdb_storage(url, kwargs)
            except Exception as e:  # noqa: BLE001 - retried only when the schema is being made
                if attempt == 4 or not any(k in str(e) for k in ("already exists", "UNIQUE")):
                    raise
                time.sleep(0.5 * (attempt + 1))
    except Exception as e:  # noqa: BLE001 - any driver error: name the URL
        raise RuntimeError(storage_error(url, e, "cannot open study storage")) from e


def shown(url: str) -> str:
    """A storage URL as it may be printed or written: its password masked
    (``postgresql://user:***@host/db``)."""
    return re.sub(r"(://[^:/@\s]+):[^@/\s]*@", r"\1:***@", str(url))


def storage_error(url: str, exc: BaseException, what: str = "study storage failed") -> str:
    """One line naming the storage and the root cause of ``exc`` (the driver's own message, not
    the wrapper Optuna raises around it), and what a damaged database file still leaves."""
    root = exc
    while root.__cause__ is not None or root.__context__ is not None:
        root = root.__cause__ or root.__context__
    cause = shown(str(root).splitlines()[0]) if str(root) else ""
    text = f"{what} {shown(url)!r}: {type(root).__name__}: {cause}"
    if any(k in str(root).lower() for k in ("malformed", "not a database", "corrupt")) \
            or _journal_damaged(root):
        text += (" (the database file is damaged: restore it from a copy, or choose another "
                 "study.storage; the finished designs' rows are also in results/<study>/trials.csv)")
    return text


def is_storage_error(exc: BaseException) -> bool:
    """Whether ``exc`` comes from the study storage (Optuna's storage errors, SQLAlchemy's or a
    database driver's), so a study stops with ``storage_error``'s line, not a traceback."""
    import optuna.exceptions

    e = exc
    while e is not None:
        mod = type(e).__module__
        if isinstance(e, optuna.exceptions.StorageInternalError) or mod.startswith(
                ("sqlalchemy", "sqlite3", "psycopg")) or _journal_damaged(e):
            return True
        e = e.__cause__ or e.__context__
    return False


def _journal_damaged(e: BaseException) -> bool:
    """A line of the workers' journal file (``optuna.journal``) that is no JSON, as Optuna's
    journal storage meets it while reading the log."""
    tb = e.__traceback__
    while tb is not None and isinstance(e, json.JSONDecodeError):
        if "optuna/storages/journal" in tb.tb_frame.f_code.co_filename.replace("\\", "/"):
            return True
        tb = tb.tb_next
    return False


def open_study(plan) -> optuna.Study:
    """Create or load the study (``load_if_exists``) with the plan's sampler and directions.

    Raises:
        RuntimeError: the storage URL cannot be opened (the message names it), or the stored
            study has another identity (``check_identity``).
    """
    storage = get_storage(plan.storage)
    for attempt in range(5):  # another process may be creating the same study right now
        try:
            study = optuna.create_study(study_name=plan.name, storage=storage,
                                        load_if_exists=True, directions=plan.directions,
                                        sampler=make_sampler(plan))
            break
        except Exception as e:  # noqa: BLE001 - a creation race, or a real storage error
            if attempt == 4 or not is_storage_error(e) and not isinstance(
                    e, optuna.exceptions.DuplicatedStudyError):
                raise
            time.sleep(0.5 * (attempt + 1))
    if list(study.directions) != [optuna.study.StudyDirection[d.upper()]
                                  for d in plan.directions]:
        raise RuntimeError(f"study {plan.name!r} exists with other directions")
    check_identity(study, plan)
    with warnings.catch_warnings():  # experimental since Optuna 3.2, stable in use
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([metric_name(o) for o in plan.objectives])  # optuna-dashboard
    study.set_user_attr("objectives", plan.objectives)
    study.set_user_attr("experiment", plan.experiment)
    study.set_user_attr("workload", plan.workload)
    study.set_user_attr("device", plan.device["name"])
    return study


def recover_interrupted(study: optuna.Study) -> int:
    """Mark RUNNING trials whose worker process on this host is gone as FAIL (``interrupted``)
    and queue their designs again. Returns how many were recovered."""
    host = socket.gethostname()
    n = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t.user_attrs.get("worker_host") != host or _alive(t.user_attrs.get("worker_pid")):
            continue
        study._storage.set_trial_user_attr(t._trial_id, "fail_reason",
                                           "interrupted: the study process died during the trial")
        study._storage.set_trial_user_attr(t._trial_id, "interrupted", True)
        study.tell(t.number, state=TrialState.FAIL)
        requeue(study, t)
        n += 1
    return n


def requeue(study: optuna.Study, t) -> dict:
    """Queue trial ``t``'s design again (its params, or the queued ones it had not sampled yet);
    returns them."""
    params = t.system_attrs.get("fixed_params", t.params)
    if params:
        study.enqueue_trial(params, skip_if_exists=False)
    return params


def _alive(pid) -> bool:
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def finished_designs(study: optuna.Study) -> list:
    """The trials that are finished designs (COMPLETE, FAIL, PRUNED), not counting trials cut
    off by a killed run, a worker's spare trial, nor a sampler's second proposal of a design
    (``duplicate_of``: see ``Objective``)."""
    trials = study.get_trials(deepcopy=False)
    gone = cut_off(trials)
    return [t for t in trials if t.state.is_finished() and t.number not in gone
            and not t.user_attrs.get("spare") and t.user_attrs.get("duplicate_of") is None]


def finished(study: optuna.Study) -> int:
    """How many designs are finished (``finished_designs``)."""
    return len(finished_designs(study))


def failed_designs(study: optuna.Study) -> int:
    """Of ``finished``'s designs, those that FAILED (an OOM, a crash, a bad checkpoint): kept as
    results, so a resumed study does not measure them again."""
    return sum(1 for t in finished_designs(study) if t.state == TrialState.FAIL)


def queued(study: optuna.Study) -> bool:
    """Whether the study has a queued (WAITING) design."""
    return any(t.state == TrialState.WAITING for t in study.get_trials(deepcopy=False))



def check_identity(study: optuna.Study, plan) -> None:
    """Resume a stored study only under the plan's identity (``sweep.config.identity.identity``); a study
    stored before identities were kept takes the plan's.

    Raises:
        RuntimeError: the study was run with another identity; the message names what differs.
    """
    old = study.user_attrs.get("identity")
    new = json.loads(json.dumps(plan.identity, default=str))  # as the storage keeps it
    if old is not None and old != new:
        diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        raise RuntimeError(
            f"study {plan.name!r} in {shown(plan.storage)} was run with another {', '.join(diff)}; "
            "its rows would describe other designs than this command's. Choose another "
            "study.name, or leave study.name unset: the default name carries the identity")
    if old is None:
        study.set_user_attr("identity", new)


def claim_results(plan, check_only: bool = False) -> None:
    """Make ``plan.results`` belong to this study in this storage (``owner.json``); with
    ``check_only`` only refuse a folder that is another's, writing nothing (before the study is
    created: a refused command leaves no empty study in the storage).

    Raises:
        RuntimeError: the folder already holds another study's outputs (another name, or the
            same name in another storage): they would be overwritten.
    """
    if not check_only:
        plan.results.mkdir(parents=True, exist_ok=True)
    owner = plan.results / "owner.json"
    me = {"study": plan.name, "storage": _canonical(plan.storage)}
    if owner.exists():
        have = json.loads(owner.read_text())
        if have != me:
            hint = (f"; to continue that study here, pass study.storage={have['storage']} (with "
                    "sweep.workers > 1 the default storage is a journal file, with one worker "
                    "SQLite)" if have.get("study") == plan.name else "")
            raise RuntimeError(
                f"{plan.results} holds the outputs of study {have['study']!r} in "
                f"{have['storage']}; this is study {plan.name!r} in {me['storage']}{hint}. Or "
                "choose another study.name or results_dir: outputs are never overwritten by "
                "another study")
        return
    if not check_only:
        write_json(owner, me)


def _canonical(url: str) -> str:
    """A storage URL with a file path made absolute (``sqlite:///x``, journal files)."""
    if url.startswith("sqlite:///"):
        return "sqlite:///" + str(Path(url.removeprefix("sqlite:///")).resolve())
    if url.startswith("journal:") or url.endswith(".journal"):
        return str(Path(url.removeprefix("journal:")).resolve())
    return shown(url)  # never a password on disk


def taken_params(study: optuna.Study) -> set[str]:
    """The designs (params as canonical JSON) the storage holds in any state but a worker's
    spare trial or an interrupted one (whose design is queued again)."""
    trials = study.get_trials(deepcopy=False)
    gone = cut_off(trials)
    return {json.dumps(t.system_attrs.get("fixed_params", t.params), sort_keys=True)
            for t in trials if not t.user_attrs.get("spare") and t.number not in gone}


def enqueue_next(study: optuna.Study, grid: dict) -> bool:
    """Queue the first design of ``grid`` (in product order) the storage does not hold yet.
    Returns False when every design of the grid is held (the grid is exhausted)."""
    from itertools import product

    have = taken_params(study)
    for point in product(*grid.values()):
        params = dict(zip(grid, point))
        if json.dumps(params, sort_keys=True) not in have:
            study.enqueue_trial(params)
            return True
    return False


def duplicate_of(study: optuna.Study, number: int) -> int | None:
    """The number of another trial that holds trial ``number``'s design, or None.

    Another trial holds it when it is COMPLETE, PRUNED or FAIL (not interrupted), or RUNNING or
    WAITING with a lower number: of two processes that take the same design at once, the one
    with the higher trial number steps back, and a design queued twice runs once.
    """
    trials = study.get_trials(deepcopy=False)
    gone = cut_off(trials)
    me = next(t for t in trials if t.number == number)
    mine = me.system_attrs.get("fixed_params", me.params)
    for t in trials:
        if t.number == number or t.user_attrs.get("spare") or t.number in gone:
            continue
        if t.system_attrs.get("fixed_params", t.params) != mine:
            continue
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL):
            return t.number
        if t.number < number:  # RUNNING or WAITING, taken or queued first
            return t.number
    return None
