"""What a person opens: report.html, pareto.html and the plots render offline in headless
Chromium (screenshots not blank, the expected sections there), load no external URL, read in
words; optuna-dashboard shows the objectives by name."""

import os
import re
import shutil
import subprocess

import pytest

pytestmark = pytest.mark.slow
CHROMIUM = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(b)), None)
OFFLINE = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           # every network request is refused: a page that needs the internet shows it
           "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>"]


def chromium():
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("CI must have Chromium (.ci/run installs Debian's chromium)")
        pytest.skip("no Chromium on this machine (apt-get install chromium)")
    return CHROMIUM


def render(page, tmp_path, name):
    """``(DOM text after scripts ran, screenshot path)`` of a local page, offline."""
    args = [chromium(), *OFFLINE, f"--user-data-dir={tmp_path / ('chr-' + name)}",
            "--virtual-time-budget=8000", "--window-size=1200,1400"]
    dom = subprocess.run([*args, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120).stdout
    shot = tmp_path / f"{name}.png"
    subprocess.run([*args, f"--screenshot={shot}", page.as_uri()], capture_output=True,
                   timeout=120)
    return dom, shot


def not_blank(png) -> bool:
    import matplotlib.image

    img = matplotlib.image.imread(png)[..., :3]
    return img.std() > 0.02 and (img < 0.9).mean() > 0.005  # more than a white page


@pytest.fixture(scope="module")
def browser():
    """Chromium, checked before the study: a test that needs it skips at once without it."""
    return chromium()


@pytest.fixture(scope="module")
def study(measured_study):
    """The run's shared completed study (``conftest.measured_study``)."""
    return measured_study


def test_pages_load_no_external_url(study):
    plan, _, _ = study
    for name in ("report.html", "pareto.html"):
        text = (plan.results / name).read_text()
        assert not re.search(r"""<(script|link|img)[^>]+(src|href)=["']?(https?:)?//""", text), name
    # one copy for every study of the results folder, not 4.8 MB in each
    assert (plan.results.parent / "plotly.min.js").stat().st_size > 1_000_000
    assert not (plan.results / "plotly.min.js").exists()
    assert 'src="../plotly.min.js"' in (plan.results / "pareto.html").read_text()


def test_report_renders_offline_with_its_sections(browser, study, tmp_path):
    plan, _, _ = study
    dom, shot = render(plan.results / "report.html", tmp_path, "report")
    for heading in ("Hardware and software", "Peaks", "Design space", "Pareto front", "Roofline",
                    "Bottlenecks and diagnosis", "Design advice", "Trials",
                    "Open in optuna-dashboard"):
        assert f">{heading}<" in dom, heading
    assert "nan" not in re.sub(r"<[^>]+>", " ", dom).lower().split()  # no NaN cells
    assert not_blank(shot)
    # the peaks read as numbers with units, not JSON; no advice that cannot run on a CPU
    assert "B/s" in dom and "{&quot;" not in dom and "peak_tflops" not in dom
    assert "mode=cudagraph" not in dom and "kernels=triton" not in dom
    # a CPU study gets no GPU advice (tensor cores, tiles, waves) and says so; the advisor did
    # not fail on its row
    assert "no advice:" not in dom and "not applied to this run on cpu" in dom


def test_interactive_front_renders_offline(browser, study, tmp_path):
    plan, _, _ = study
    dom, shot = render(plan.results / "pareto.html", tmp_path, "pareto")
    assert "main-svg" in dom  # plotly drew the figure without the network
    assert "decode tokens/s" in dom and "non-embedding parameters" in dom
    assert not_blank(shot)


@pytest.mark.parametrize("png", ["pareto.png", "roofline.png"])
def test_plots_render_and_read_in_words(browser, study, tmp_path, png):
    plan, _, _ = study
    page = tmp_path / f"{png}.html"
    page.write_text(f"<!doctype html><img src='{(plan.results / png).as_uri()}'>")
    _, shot = render(page, tmp_path, png)
    assert not_blank(shot) and not_blank(plan.results / png)


def test_dashboard_lists_objective_names(study):
    plan, _, _ = study
    optuna_dashboard = pytest.importorskip("optuna_dashboard")
    import io
    import json
    from wsgiref.util import setup_testing_defaults

    app = optuna_dashboard.wsgi(plan.storage)

    def get(path):
        env, out = {"PATH_INFO": path, "wsgi.errors": io.StringIO()}, {}
        setup_testing_defaults(env)
        body = b"".join(app(env, lambda status, headers, *exc: out.update(status=status)))
        assert out["status"].startswith("200"), (out, env["wsgi.errors"].getvalue()[-2000:])
        return json.loads(body)

    studies = {s["study_name"]: s for s in get("/api/studies")["study_summaries"]}
    names = get(f"/api/studies/{studies[plan.name]['study_id']}")["objective_names"]
    assert names == ["decode_tok_s (tokens/s)", "params_non_embedding (parameters)"]
