"""Every command of the README's code blocks, run in the README's order on the CPU, as a newcomer
copies them: each exits 0 with no traceback and writes what it should. A command added to the
README is covered the day it is written (the blocks are parsed here, not copied)."""

import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow
# parts of the set-up lines this suite cannot run inside itself: the environment they make is
# the one running it (CI ran them), and the test command is this suite
SET_UP = ("python3 -m venv .venv", ". .venv/bin/activate", "python -m sweep.cli.install",
          "python -m pytest -q -n 2")


def readme_commands() -> list[str]:
    """Each command of the README's ``bash`` blocks, in order, comments cut, ``&&`` chains split."""
    text = (REPO / "README.md").read_text()
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            out += [c.strip() for c in line.split("&&") if c.strip()] if line else []
    return out


def test_the_readme_lists_its_commands():
    cmds = readme_commands()
    assert cmds[:4] == [*SET_UP[:3], "python -m sweep +experiment=gqa_vs_mha"]
    assert "python -m pytest -q -n 2" in cmds and any("optuna-dashboard" in c for c in cmds)
    assert sum(c.startswith("python -m sweep") for c in cmds) >= 10


def _dashboard(cmd: str, cwd: Path, env: dict) -> str:
    """Start ``optuna-dashboard`` on a free port, read its front page, stop it."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([*shlex.split(cmd), "--port", str(port), "--host", "127.0.0.1"],
                            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=5) as r:
                    return r.read().decode()
            except OSError:
                time.sleep(0.5)
        pytest.fail(f"{cmd}: no answer on port {port}")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def test_every_readme_command_runs_on_the_cpu(tmp_path):
    """In README order, from a folder of its own (``results/`` there: ``results_dir`` is set for
    the study commands, so the globs of the later lines find the studies)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), PATH=f"{Path(sys.executable).parent}:"
               f"{os.environ.get('PATH', '')}", PYTHONUNBUFFERED="1")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    results = tmp_path / "results"
    ran = []
    for cmd in readme_commands():
        if cmd in SET_UP:
            ran.append(f"set-up (this suite's own environment): {cmd}")
            continue
        if cmd.startswith("optuna-dashboard"):
            body = _dashboard(cmd, tmp_path, env)
            assert "gqa_vs_mha" in body and "ffn_width" in body, body[:300]
            ran.append(f"ran (answered): {cmd}")
            continue
        run = cmd.replace("python ", f"{sys.executable} ", 1)
        if re.match(r"python -m sweep(\s|$)", cmd):
            run += f" results_dir={results}"
        r = subprocess.run(["bash", "-c", run], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=900)
        out = r.stdout + r.stderr
        assert r.returncode == 0 and "Traceback" not in out, f"{cmd}\n{out[-3000:]}"
        ran.append(f"ran: {cmd}")
        if "+experiment=kv_quant model.kernels=torch" in cmd:  # the quantized half, said so
            assert "6 of the space's 9 designs left out: kv_dtype=int8 needs kernels='triton'" in out
        if re.match(r"python -m sweep(\s|$)", cmd):  # a study: its folder, table and report
            assert "results: " in out, out[-1000:]
            folder = Path(re.search(r"results: (\S+)/ \(", out).group(1))
            for f in ("trials.parquet", "report.html", "pareto.png", "study.json"):
                assert (folder / f).exists(), (cmd, f)
            if "study.predict=true" not in cmd:
                assert list(folder.glob("predicted_h100_sxm.csv")), cmd  # the real designs
    print("\n".join(ran))
    assert (results / "my.db").exists()  # a relative SQLite storage lands among the results
    assert not (tmp_path / "my.db").exists()


def test_pictures_read_in_units_of_their_data_and_say_what_they_show(tmp_path):
    """Axis labels take the unit of counts and bytes from the data's size; a predicted study's
    plots say PREDICTED and on which chip; a fronts page names what it compares."""
    import pandas as pd

    from sweep.report.labels import label
    from sweep.report.plots import caption, pareto_plot

    assert label("params_non_embedding", [3.5e5, 4e5]) == ("non-embedding parameters "
                                                           "(thousands)", 1e3)
    assert label("params_non_embedding", [1.2e9]) == ("non-embedding parameters (billions)", 1e9)
    assert label("kv_bytes_per_token", [256, 2048])[1] == 1024
    assert label("peak_mem_bytes", [5e9])[0].endswith("(GiB)")
    rows = pd.DataFrame({"state": "COMPLETE", "decode_tok_s": [10.0, 20.0, 15.0],
                         "prefill_tok_s": [5.0, 2.0, 4.0], "kv_bytes_per_token": [1, 2, 3],
                         "predicted": True, "target": "mi300x", "batch": 1, "prompt_len": 512,
                         "new_tokens": 128, "number": [0, 1, 2]})
    assert caption(rows).startswith("PREDICTED on mi300x; batch 1")
    paths = pareto_plot(rows, ["decode_tok_s", "prefill_tok_s", "kv_bytes_per_token"],
                        ["maximize", "maximize", "minimize"], tmp_path, title="design_space")
    page = (tmp_path / "pareto.html").read_text()
    assert "PREDICTED on mi300x" in page and "on the Pareto front" in page
    assert "True" not in re.findall(r'"name":"([^"]*)"', page)  # no 'Pareto front: True'
    assert all(p.exists() for p in paths)


ENTRIES = ["sweep.cli.calibrate", "sweep.cli.bench", "sweep.cli.compare", "sweep.cli.compare_fronts",
           "sweep.cli.whatif", "sweep.cli.advise", "sweep.cli.record", "sweep.cli.workers_check",
           "sweep.cli.validate", "sweep.report.html_report", "sweep.report.prediction_check",
           "sweep.caches.ceiling_cache"]


@pytest.mark.parametrize("entry", ["sweep.cli.compare", "sweep.report.prediction_check"])
def test_a_commands_usage_names_it_as_typed(entry):
    r = subprocess.run([sys.executable, "-m", entry, "--help"], cwd=REPO, capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == 0 and r.stdout.startswith(f"usage: python -m {entry} "), r.stdout[:200]


@pytest.mark.parametrize("entry", ENTRIES)
def test_every_entry_answers_help_and_a_missing_path_without_a_traceback(entry, capsys,
                                                                         tmp_path):
    """``--help`` exits 0 with a usage; a path that does not exist ends with one ``error:`` line
    (exit 2), never a traceback."""
    import importlib

    mod = importlib.import_module(entry)
    main = mod.main
    from sweep.common.entry import entry as run

    with pytest.raises(SystemExit) as e:
        run(lambda: main(["--help"]))
    assert e.value.code == 0 and "usage" in capsys.readouterr().out.lower()
    missing = str(tmp_path / "no_such_study")
    args = {"sweep.cli.calibrate": None, "sweep.cli.bench": None,
            "sweep.caches.ceiling_cache": None, "sweep.cli.advise": None,
            "sweep.cli.whatif": [missing, "--hardware", "h200"],
            "sweep.cli.record": [str(tmp_path / "r.json"), missing, "--command", "x"],
            "sweep.cli.validate": ["--set", missing + ".yaml"],
            "sweep.cli.compare": [missing, missing],
            "sweep.cli.workers_check": [missing, missing]}.get(entry, [missing])
    if args is None:  # takes no path (it measures this machine)
        return
    try:
        rc = run(lambda: main(args))
    except SystemExit as e:  # argparse's own refusals
        rc = e.code
    out = capsys.readouterr()
    assert rc == 2, (entry, out)
    assert "Traceback" not in out.out + out.err and "error" in (out.out + out.err).lower()


def test_old_records_still_load_and_render(tmp_path):
    """A study committed by an earlier day's code (results/reference/whatif_h100/studies/)
    loads under today's row names and its report renders."""
    import shutil

    from sweep.report.html_report import write_report
    from sweep.report.tables import load_study

    src = REPO / "results/reference/whatif_h100/studies/gqa_vs_mha-b1"
    shutil.copytree(src, tmp_path / "old")
    meta, df = load_study(tmp_path / "old")
    assert len(df) == 6 and "decode_tpot_ms" in df and meta["objectives"]
    page = write_report(tmp_path / "old").read_text()
    assert "Pareto front" in page and "Trials" in page
