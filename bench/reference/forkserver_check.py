"""On a GPU host: does the fork server serve here, and does a forked child use the GPU?

Forks the ceilings child on ``cuda`` through ``child.launch``, as a study starts it (its fork
server started on first use, ``sweep.measure.forkserver``), then starts the same child as a new
interpreter (behind ``env``, which no fork server takes), and times both. Prints one JSON line:
``served`` (the server said ready), ``why`` (its refusal), ``forked_rc`` / ``forked_s`` /
``forked_copy_bytes_s`` and the same of ``spawned``. Exit 0 only when the server served and the
forked child exited 0.   python bench/reference/forkserver_check.py OUT_DIR
"""

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sweep.measure import child, forked  # noqa: E402


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    said = {}
    for how, wrap in (("forked", []), ("spawned", ["env"])):
        cmd = [*wrap, sys.executable, "-m", "sweep.measure.ceilings", str(out / f"{how}.json"),
               "--device", "cuda"]
        t0 = time.perf_counter()
        rc = child.launch(cmd, out / f"{how}.log", 300)
        said[f"{how}_rc"], said[f"{how}_s"] = rc, round(time.perf_counter() - t0, 2)
        if (out / f"{how}.json").exists():
            said[f"{how}_copy_bytes_s"] = json.loads((out / f"{how}.json").read_text()).get(
                "copy_bytes_s")
        if how == "forked":
            (srv,) = forked._servers.values()  # the one this launch started (read only)
            said.update(served=srv.ready, why=srv.why)
    forked.close_all()
    print(json.dumps(said))
    return 0 if said["forked_rc"] == 0 and said["served"] else 1


if __name__ == "__main__":
    sys.exit(main())
