"""How the burst bf16 GEMM ceiling depends on what ran just before it (2026-11-25): the ceilings
measured back to back, with the idle before timing (``IDLE_S``, after the 0.25 s warm-up) at 1, 3
and 6 s, twice each; with ``--same N``, N times at the default idle (how much the sustained rate and
the power limit's onset vary run to run on one card, 2026-11-27). Usage on a GPU host:
``python bench/reference/ceilings_probe.py OUT.json [--same N]``."""

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sweep.measure import ceilings  # noqa: E402

rows = []
idles = (1.0, 1.0, 3.0, 3.0, 6.0, 6.0)
if "--same" in sys.argv:
    idles = (ceilings.IDLE_S,) * int(sys.argv[sys.argv.index("--same") + 1])
for idle in idles:
    ceilings.IDLE_S = idle
    t0 = time.time()
    c = ceilings.measure("cuda")
    rows.append({"idle_s": idle, "wall_s": round(time.time() - t0, 1),
                 **{k: c[k] for k in ("copy_bytes_s", "gemm_flops_bf16", "gemm_flops_fp16",
                                      "gemm_flops_bf16_sustained", "power_onset_s")}})
    print({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in rows[-1].items()}, flush=True)
Path(sys.argv[1]).write_text(json.dumps(rows, indent=1))
