"""The bad-input table: bad command lines over every command, each run as a user runs it.

    python tests/bad_inputs.py results/reference/bad_inputs   # writes .md and .csv
    python tests/bad_inputs.py OUT --only compare              # the cases whose id has 'compare'

Each case runs in a fresh results folder on the CPU with no Triton interpreter, as a newcomer's
machine runs it, after a tiny measured study and a predict-only one (the inputs of the report
commands) and damaged copies of them. Classes:

- ``A`` refused by name before any work: exit 2 with one ``error:`` line, no study created;
- ``B`` handled: a non-zero exit with one ``error:`` line (a run that failed: exit 1);
- ``OK`` a control: valid input that ran (exit 0);
- ``C`` a traceback (a bug); ``D`` silently wrong: exit 0 on bad input, or a secret echoed (a
  bug); ``T`` no answer within the case's time (a bug).

Not a pytest module (no ``test_`` prefix): about seven minutes on two cores. Its table is
committed (``results/reference/bad_inputs.md``); a run with any C, D or T exits 1.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ENV = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES")}
ENV |= {"PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
SECRET = "s3cr3tpw"

# (id, command after "python -m", expected: bad | ok). {S}: a measured study folder, {P}: a
# predict-only one, {T}: a study folder with a truncated trials.parquet, {E}: an empty folder,
# {R}: this case's own results folder, {X}: an unwritable place
SWEEP_BAD = [
    # decode mode and device
    "mode=turbo", "mode=cudagraph", "mode=compile", "mode=", "device=tpu", "device=cuda",
    # the design
    "model.kv_dtype=int8", "model.kv_dtype=fp8_e4m3", "model.kv_dtype=fp16", "model.kv_dtype=int4",
    "model.n_layers=100000", "model.n_layers=0", "model.n_layers=-1", "model.n_layers=abc",
    "model.n_layers=1.5", "model.n_heads=0", "model.n_heads=abc", "model.n_kv_heads=3",
    "model.n_kv_heads=16", "model.n_kv_heads=0", "model.head_dim=15", "model.head_dim=0",
    "model.d_model=0", "model.ffn_dim=-5", "model.vocab_size=0", "model.max_seq_len=10",
    "model.dtype=fp8", "model.dtype=int4", "model.ffn_type=relu", "model.norm=batchnorm",
    "model.kernels=cuda", "model.kernels=triton", "model.norm_eps=0", "model.norm_eps=-1",
    "model.rope_theta=0", "model.rope_theta=-10", "model.tie_embeddings=maybe",
    "model.qkv_bias=2", "model.weight_dtype=q4_0", "model.weight_dtype=nosuch", "+model.foo=1",
    "model=nosuch", "model=llama3_2_1b model.rope_scaling.factor=-1",
    "model=llama3_2_1b model.rope_scaling.low_freq_factor=0",
    # the workload
    "workload.batch=0", "workload.batch=-3", "workload.batch=abc", "workload.prompt_len=0",
    "workload.new_tokens=0", "workload.repeats=0", "workload.warmup=-1", "workload.timeout_s=0",
    "workload.timeout_s=-5", "workload=nosuch", "workload.prompt_len=100000", "+workload.foo=1",
    "cpu.workload.batch=0", "cpu.model=nosuch", "cpu.predict_on=[nosuch_gpu]",
    # the study
    "study.n_trials=0", "study.n_trials=-1", "study.n_trials=abc", "study.sampler=nosuch",
    "study.objectives=[nosuch]", "study.directions=[up,down]", "study.objectives=[decode_tok_s]",
    "study.objectives=[decode_j_per_token] study.directions=[minimize]",
    f"study.storage=postgresql://u:{SECRET}@127.0.0.1:9/db", "study.storage=nosuch://x",
    "study.storage=sqlite:////proc/x/db.sqlite", "study.predict=maybe", "study.predict=true",
    "+study.n_trails=3", "+foo=bar", "+cpu.foo=1",
    # the experiment
    "+experiment=nosuch", "+experiment=gqa_vs_mha experiment.space.n_kv_heads.divisors_of=nosuch",
    "+experiment.space.n_kv_heads.bogus=1", "+experiment.space.foo.choices=[1,2]",
    "+experiment.space.n_kv_heads.choices=[]", "+experiment.constraints.nosuch.high=1",
    "+experiment.constraints.params_total=5",
    # groups, switches and the rest
    "hardware=nosuch", "profile=nosuch", "profile=nsys", "switches.pdl=maybe",
    "study.predict=true hardware=h200 hardware.memory_gb=abc",
    "study.predict=true hardware=h200 +hardware.foo=1",
    "study.predict=true hardware=h200 hardware.hbm_gb_s=-5",
    "switches.nosuch=true", "seed=abc", "results_dir=/proc/x", "results_dir=/dev/null",
    "cache_dir=/proc/x", "weights=/nonexistent", "weights=/etc/hostname",
    "calibration=/nonexistent.json", "calibration=/etc/hostname", "calibration_policy=nosuch",
    "sweep.workers=0", "sweep.workers=abc", "quiet=maybe", "model.n_layers", "=3", "model..x=1",
    "+experiment=kv_quant", "fault=measure:raise",
    # an audit's (twenty-eighth session): an empty hf_config, a malformed space, bad objectives
    # (braces doubled: each line is a str.format template)
    "+model.hf_config=", "+model.hf_config=null", "model.rope_scaling={{rope_type:dynamic,factor:2.0}}",
    "+experiment.space.n_kv_heads={{choices:5}}", "+experiment.space.n_kv_heads={{choices:abc}}",
    "+experiment.space.n_kv_heads={{low:16,high:2}}", "+experiment.space.b={{choices:{{a:{{foo:1}}}}}}",
    "+experiment.space.batch={{choices:[0,1]}}", "+experiment.space.mode={{choices:[fast]}}",
    "study.objectives=[] study.directions=[]",
    "study.objectives=[decode_tok_s,decode_tok_s] study.directions=[maximize,minimize]",
    "study.predict=true hardware=h100_sxm study.objectives=[decode_mbu_vs_measured] "
    "study.directions=[maximize]", "+experiment.constraints.params_total={{low:5,high:1}}",
]
SWEEP_OK = ["", "profile=ncu", "+experiment=gqa_vs_mha study.n_trials=2",
            "+experiment=design_space study.predict=true hardware=h100_sxm study.n_trials=5"]
OTHER = [
    # compare
    ("sweep.cli.compare", "bad"), ("sweep.cli.compare /nonexistent /nonexistent", "bad"),
    ("sweep.cli.compare {S} /nonexistent", "bad"), ("sweep.cli.compare {S} {S} --threshold -1", "bad"),
    ("sweep.cli.compare {S} {S} --threshold 2", "bad"), ("sweep.cli.compare {S} {S} --threshold abc", "bad"),
    ("sweep.cli.compare {T} {S}", "bad"), ("sweep.cli.compare {E} {S}", "bad"),
    ("sweep.cli.compare {S} {S}", "ok"), ("sweep.cli.compare {S} {S} {S}", "bad"),
    # compare_fronts
    ("sweep.cli.compare_fronts", "bad"), ("sweep.cli.compare_fronts /nonexistent", "bad"),
    ("sweep.cli.compare_fronts {S} --objectives nosuch:max", "bad"),
    ("sweep.cli.compare_fronts {S} --objectives decode_tok_s:up", "bad"),
    ("sweep.cli.compare_fronts {S} --out {X}", "bad"), ("sweep.cli.compare_fronts {T}", "bad"),
    ("sweep.cli.compare_fronts {S} --out {R}/fronts", "ok"),
    # whatif
    ("sweep.cli.whatif", "bad"), ("sweep.cli.whatif {S}", "bad"),
    ("sweep.cli.whatif {S} --hardware nosuch", "bad"),
    ("sweep.cli.whatif /nonexistent --hardware h200", "bad"),
    ("sweep.cli.whatif {S} --hardware h200 --calibration /nonexistent.json", "bad"),
    ("sweep.cli.whatif {S} --hardware h200 --out {X}", "bad"),
    ("sweep.cli.whatif {T} --hardware h200", "bad"),
    ("sweep.cli.whatif --check-public --data /nonexistent", "bad"),
    ("sweep.cli.whatif --check-public --out {X}", "bad"),
    ("sweep.cli.whatif {S} --hardware h200 m4_max --out {R}/whatif", "ok"),
    # advise
    ("sweep.cli.advise model=nosuch", "bad"), ("sweep.cli.advise --band 1.5", "bad"),
    ("sweep.cli.advise --band -0.1", "bad"), ("sweep.cli.advise --top 0", "bad"),
    ("sweep.cli.advise --top abc", "bad"), ("sweep.cli.advise --calibration /nonexistent.json", "bad"),
    ("sweep.cli.advise hardware=nosuch", "bad"), ("sweep.cli.advise model.n_heads=0", "bad"),
    ("sweep.cli.advise --out {X}", "bad"),
    ("sweep.cli.advise model=llama3_2_1b model.ffn_dim=8100 hardware=h100_sxm --out {R}/advise", "ok"),
    # validate
    ("sweep.cli.validate --set nosuch", "bad"), ("sweep.cli.validate --only nosuch_pair", "bad"),
    ("sweep.cli.validate --hardware nosuch", "bad"),
    ("sweep.cli.validate --calibration /nonexistent.json", "bad"),
    ("sweep.cli.validate --device cuda", "bad"), ("sweep.cli.validate --measured /nonexistent.jsonl", "bad"),
    # calibrate
    ("sweep.cli.calibrate --device cuda", "bad"), ("sweep.cli.calibrate --timeout 0", "bad"),
    ("sweep.cli.calibrate --timeout -1", "bad"), ("sweep.cli.calibrate --timeout abc", "bad"),
    ("sweep.cli.calibrate --results-dir {X}", "bad"), ("sweep.cli.calibrate --device tpu", "bad"),
    # record
    ("sweep.cli.record", "bad"), ("sweep.cli.record {R}/rec.json /nonexistent --command x", "bad"),
    ("sweep.cli.record {X}/rec.json {S} --command x", "bad"),
    ("sweep.cli.record {R}/rec.txt {S} --command x", "bad"),
    ("sweep.cli.record {S}/study.json {S} --command x", "bad"),
    ("sweep.cli.record {R}/rec.json {S} --command x", "ok"),
    # report pages
    ("sweep.report.html_report", "bad"), ("sweep.report.html_report /nonexistent", "bad"),
    ("sweep.report.html_report {T}", "bad"), ("sweep.report.html_report {E}", "bad"),
    ("sweep.report.html_report {S}", "ok"),
    ("sweep.report.prediction_check /nonexistent", "bad"), ("sweep.report.prediction_check {T}", "bad"),
    ("sweep.report.prediction_check {S} --out {X}/out.json", "bad"),
    ("sweep.report.prediction_check {P}", "bad"), ("sweep.report.prediction_check {S}", "ok"),
    # workers, bench, install
    ("sweep.cli.workers_check", "bad"), ("sweep.cli.workers_check /nonexistent /nonexistent", "bad"),
    ("sweep.cli.bench --out {R}/b.json --group nosuch", "bad"),
    ("sweep.cli.bench --out {R}/b.json --group small", "bad"),
    ("sweep.cli.bench --out {R}/b.json --switch pdl=maybe", "bad"),
    ("sweep.cli.install --help", "ok"),
]


def cases() -> list[tuple[str, list[str], str]]:
    out = []
    for over in SWEEP_BAD + SWEEP_OK:
        args = over.split() if over else []
        if not any(a.startswith(("results_dir=", "study.storage=")) for a in args):
            args = args + ["results_dir={R}", "quiet=true"]
        elif not any(a.startswith("results_dir=") for a in args):
            args = args + ["results_dir={R}"]
        shown = over.replace("{{", "{").replace("}}", "}")  # as the user types it
        out.append(("sweep " + (shown or "(no override)"), ["sweep", *args],
                    "ok" if over in SWEEP_OK else "bad"))
    for cmd, expect in OTHER:
        out.append((cmd.removeprefix("sweep."), cmd.split(), expect))
    return out


def classify(rc: int | None, text: str, expect: str) -> str:
    if rc is None:
        return "T"
    if "Traceback (most recent call last)" in text or SECRET in text:
        return "C" if SECRET not in text else "D"
    if expect == "ok":
        return "OK" if rc == 0 else "D"
    if rc == 0:
        return "D"
    said = "error:" in text
    return ("A" if rc == 2 else "B") if said else "D"


def fixtures(tmp: Path) -> dict:
    """A measured tiny study, a predict-only one, a truncated copy, an empty folder."""
    def run(*args):
        r = subprocess.run([sys.executable, "-m", "sweep", *args, f"results_dir={tmp}/fx",
                            "quiet=true"], cwd=REPO, env=ENV, capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]

    run("+experiment=gqa_vs_mha", "study.n_trials=2")
    run("+experiment=design_space", "study.predict=true", "hardware=h100_sxm", "study.n_trials=5")
    studies = [p for p in (tmp / "fx").iterdir() if (p / "study.json").exists()]
    measured = next(p for p in studies if "predicted" not in p.name)
    predicted = next(p for p in studies if "predicted" in p.name)
    trunc = tmp / "trunc"
    shutil.copytree(measured, trunc)
    (trunc / "trials.parquet").write_bytes((measured / "trials.parquet").read_bytes()[:100])
    empty = tmp / "empty"
    empty.mkdir()
    return {"S": str(measured), "P": str(predicted), "T": str(trunc), "E": str(empty),
            "X": "/proc/x"}


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    only = argv[argv.index("--only") + 1] if "--only" in argv else None
    rows = []
    with tempfile.TemporaryDirectory(prefix="designzoo-bad-") as d:
        tmp = Path(d)
        fx = fixtures(tmp)
        for i, (cid, cmd, expect) in enumerate(cases()):
            if only and only not in cid:
                continue
            r_dir = tmp / f"r{i:03d}"
            args = [a.format(R=r_dir, **fx) for a in cmd]
            t0 = time.time()
            try:
                p = subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=ENV,
                                   capture_output=True, text=True, timeout=300)
                rc, text = p.returncode, p.stdout + p.stderr
            except subprocess.TimeoutExpired as e:
                rc, text = None, str(e)
            wall = time.time() - t0
            made = (r_dir / "optuna.db").exists()
            cls = classify(rc, text, expect)
            if cls == "A" and made and cmd[0] == "sweep":
                cls = "B"  # refused, but after a study was created
            last = next((ln for ln in reversed(text.splitlines()) if "error" in ln.lower()),
                        text.strip().splitlines()[-1] if text.strip() else "")
            rows.append({"id": cid, "expect": expect, "exit": rc, "class": cls,
                         "seconds": round(wall, 1), "study_created": made,
                         "message": last.strip()[:300]})
            print(f"{cls:2} rc={rc} {wall:5.1f}s {cid}: {last.strip()[:140]}", flush=True)
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    counts = {c: sum(r["class"] == c for r in rows) for c in ("A", "B", "OK", "C", "D", "T")}
    lines = ["# Bad input answered honestly: the table", "",
             f"`python tests/bad_inputs.py {out}` on the CPU (no GPU, no Triton interpreter), "
             f"{len(rows)} command lines. Classes (the script's docstring): "
             + ", ".join(f"{c} {n}" for c, n in counts.items()), "",
             "| class | exit | s | study made | command | message |", "|---|---:|---:|---|---|---|"]
    for r in rows:
        msg = r["message"].replace("|", "\\|")
        lines.append(f"| {r['class']} | {r['exit']} | {r['seconds']} | "
                     f"{'yes' if r['study_created'] else ''} | `{r['id']}` | {msg} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(counts)
    return 1 if counts["C"] or counts["D"] or counts["T"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
