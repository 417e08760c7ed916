"""On a GPU host: does the fork server serve here, and does a forked child use the GPU?

Starts a fork server as a study would (``sweep.measure.forkserver``), forks the ceilings child
on ``cuda`` through ``child.launch`` and times it against the same child started as a new
interpreter. Prints one JSON line: ``served`` (the server said ready), ``why`` (its refusal),
``forked_rc`` / ``forked_s`` and ``spawned_rc`` / ``spawned_s``. Exit 0 only when the forked
child ran on the GPU and exited 0.   python bench/reference/forkserver_check.py OUT_DIR
"""

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sweep.measure import child, forkserver  # noqa: E402


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    env = child.child_env()
    srv = forkserver.Server(env)
    said = {"served": srv.ready, "why": srv.why}
    if srv.ready:
        forkserver._servers[forkserver._key(env)] = srv
    for how in ("forked", "spawned"):
        cmd = [sys.executable, "-m", "sweep.measure.ceilings", str(out / f"{how}.json"),
               "--device", "cuda"]
        if how == "spawned":
            forkserver.close_all()
            forkserver._servers[forkserver._key(env)] = type("Off", (), {"ready": False})()
        t0 = time.perf_counter()
        rc = child.launch(cmd, out / f"{how}.log", 300)
        said[f"{how}_rc"], said[f"{how}_s"] = rc, round(time.perf_counter() - t0, 2)
        if (out / f"{how}.json").exists():
            said[f"{how}_copy_bytes_s"] = json.loads((out / f"{how}.json").read_text()).get(
                "copy_bytes_s")
    forkserver._servers.clear()
    print(json.dumps(said))
    return 0 if said.get("forked_rc") == 0 and srv.ready else 1


if __name__ == "__main__":
    sys.exit(main())
