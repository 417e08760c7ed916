"""A trial left RUNNING by a worker on another host that died is retried by any process: Optuna's
heartbeat on RDB storages fails it once its grace period passes, and ``storage.retry_dead``
queues its design again (``sweep.storage``)."""

import time

import optuna
from optuna.trial import TrialState

from sweep import storage
from sweep.report.tables import trials_frame


def test_a_dead_hosts_running_trial_is_retried(tmp_path, monkeypatch):
    monkeypatch.setattr(storage, "HEARTBEAT_S", 1)
    monkeypatch.setattr(storage, "GRACE_S", 1)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="s", storage=storage.get_storage(url))
    study.enqueue_trial({"n_kv_heads": 4})
    dead = study.ask()  # RUNNING, taken by a worker on another host that then died
    dead.set_user_attr("worker_host", "another-host")
    dead.set_user_attr("worker_pid", 1)
    study._storage.record_heartbeat(dead._trial_id)
    assert storage.recover_interrupted(study) == 0  # not this host's: left to the heartbeat
    time.sleep(2.5)  # past the grace period, no beat

    seen = []  # another process of the study starts its next trial: Optuna fails the stale one
    again = optuna.load_study(study_name="s", storage=storage.get_storage(url))
    again.optimize(lambda t: seen.append(t.suggest_int("n_kv_heads", 1, 32)) or 1.0, n_trials=1)

    trials = again.get_trials(deepcopy=False)
    old = next(t for t in trials if t.number == dead.number)
    assert old.state == TrialState.FAIL
    retry = next(t for t in trials if t.user_attrs.get("retry_of") == dead.number)
    assert retry.params == {"n_kv_heads": 4} and seen == [4]  # the same design, run again
    assert storage.finished(again) == 1  # the dead trial is not a finished design
    assert storage.duplicate_of(again, retry.number) is None
    row = trials_frame(again).set_index("number").loc[dead.number]
    assert row["interrupted"] and "stopped beating" in row["fail_reason"]
