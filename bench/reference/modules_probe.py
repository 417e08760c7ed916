"""Per-kernel times of held-out pairs' graphed decode steps (and prefills), for the comparison
with the performance model's kernel prices that finds a tail's cause: each pair run once as a
trial with ``profile_window=modules`` (``sweep.measure.modules``: the step under torch.profiler,
each GPU kernel attributed to its module), its kernel lists kept. Timing only, no pricing: the
prices are made offline from these files (no tuning on them: the pairs are held-out).

    ONLY=d64_w768,d2_w512 python3 bench/reference/modules_probe.py OUT_DIR
"""

import json
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sweep.cli.validate import items, load_set  # noqa: E402
from sweep.common.env import detect_device  # noqa: E402
from sweep.measure.child import child_failure, run_child, trial_spec  # noqa: E402


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    dev = detect_device("auto")
    s = load_set(os.environ.get("SET", "heldout"))
    only = [x for x in os.environ.get("ONLY", "").split(",") if x]
    res = {}
    for p, cfg, wl, mode in items(s, dev["type"], only or None):
        d = out / p["name"]
        spec = trial_spec(cfg, wl, dev["type"], mode, d,
                          tuning_dir=ROOT / "results" / "tuning")
        spec = dict(spec, profile_window="modules",
                    env=dict(spec.get("env", {}), DESIGNZOO_NVTX="0"))
        r = run_child(spec, d, 600.0)
        ok = r.get("status") == "ok"
        res[p["name"]] = r["measured"] if ok else {"fail_reason": child_failure(r)}
        print(p["name"], "ok" if ok else res[p["name"]]["fail_reason"][:200], flush=True)
        for f in d.glob("*"):  # keep the kernel lists and the result, not the trial's scratch
            if f.is_file() and not (f.name.startswith("kernels_") or f.name in (
                    "result.json", "log.txt")):
                f.unlink()
            elif f.is_dir():
                shutil.rmtree(f, ignore_errors=True)
    (out / "modules_probe.json").write_text(json.dumps(res, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
