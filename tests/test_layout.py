"""The layout shows the layers: packages exist, files stay small, imports go one way, no circles."""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CODE = [p for top in ("zoo", "kernels", "sweep") for p in (REPO / top).rglob("*.py")]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


KNOWN = {module_name(p) for p in CODE}


def imports(path: Path) -> set[str]:
    """Project modules ``path`` imports (absolute or relative, at any depth of the file)."""
    mod = module_name(path)
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            subs = {f"{base}.{a.name}" for a in node.names}
            # ``from . import sub`` names the submodule, not the package's own code
            out |= subs if subs <= KNOWN else {base} | subs
    known = KNOWN
    return {m for m in out if m in known and m != mod}


GRAPH = {module_name(p): imports(p) for p in CODE}


def test_layer_packages_exist():
    for pkg in ("sweep/analysis", "sweep/report", "sweep/measure", "sweep/caches"):
        init = REPO / pkg / "__init__.py"
        assert init.exists(), pkg
        assert "May import" in init.read_text(), f"{pkg}/__init__.py must say what it may import"


def test_files_stay_small():
    assert len((REPO / "sweep/study.py").read_text().splitlines()) <= 250
    big = {str(p.relative_to(REPO)): n for p in CODE
           if (n := len(p.read_text().splitlines())) > 400}
    assert not big, big


def test_no_import_circles():
    def reach(start):
        seen, todo = set(), [start]
        while todo:
            for m in GRAPH.get(todo.pop(), ()):
                if m not in seen:
                    seen.add(m)
                    todo.append(m)
        return seen

    circles = sorted(m for m in GRAPH if m in reach(m) and "." in m)
    circles = [m for m in circles if not m.endswith("__init__")]
    assert not circles, circles


@pytest.mark.parametrize("pkg,forbidden", [
    ("sweep.measure", ("sweep.study", "sweep.objective", "sweep.plan", "sweep.analysis",
                       "sweep.report", "sweep.caches")),
    # the performance model starts no measurement: it is handed the caches' contents
    ("sweep.analysis", ("sweep.study", "sweep.objective", "sweep.plan", "sweep.report",
                        "sweep.measure", "sweep.caches")),
    ("sweep.caches", ("sweep.study", "sweep.objective", "sweep.plan", "sweep.report")),
    ("sweep.report", ("sweep.study", "sweep.objective", "sweep.plan", "sweep.measure",
                      "sweep.caches")),
    ("zoo", ("sweep",)),
    ("kernels", ("sweep", "zoo")),
])
def test_imports_go_downward(pkg, forbidden):
    bad = {m: sorted(i for i in deps if i.startswith(forbidden))
           for m, deps in GRAPH.items() if m == pkg or m.startswith(pkg + ".")}
    assert not {m: d for m, d in bad.items() if d}


def test_the_report_prices_nothing_itself():
    """``sweep.report`` formats what the performance model priced: none of its modules imports
    the pricing, the kernel list or a target's prediction (``sweep.analysis.pricing``,
    ``predict``, ``targets``, ``anchors``); it asks ``sweep.analysis.study_targets`` / ``advice``."""
    pricing = ("sweep.analysis.pricing", "sweep.analysis.predict", "sweep.analysis.targets",
               "sweep.analysis.anchors")
    bad = {m: sorted(d & set(pricing)) for m, d in GRAPH.items()
           if m.startswith("sweep.report") and d & set(pricing)}
    assert not bad, bad


def test_objective_calls_each_profiler_once():
    text = (REPO / "sweep/objective.py").read_text() + (REPO / "sweep/study.py").read_text()
    for name in ("_ncu", "_nsys", "_torch"):
        assert name not in text


def test_sweep_root_holds_the_study_loop_only():
    """Entry points live in ``sweep/cli``, measuring in ``sweep/measure``, the ground floor in
    ``sweep/common``: the root keeps the study loop, at most ten files."""
    files = sorted(p.name for p in (REPO / "sweep").glob("*.py"))
    assert len(files) <= 10, files


def test_no_file_name_twice():
    from collections import Counter

    names = Counter(p.name for p in CODE if p.name not in ("__init__.py", "__main__.py"))
    assert not {n: c for n, c in names.items() if c > 1}


# ---- the README's layout section, generated from the tree ---------------------------------
LAYOUT_PACKAGES = ["zoo", "kernels", "sweep", "sweep/common", "sweep/config", "sweep/cli", "sweep/measure",
                   "sweep/caches", "sweep/analysis", "sweep/report", "bench"]
BEGIN, END = "<!-- layout: generated by `python -m tests.test_layout`; do not edit -->", \
    "<!-- layout: end -->"


def _summary(path: Path, most: int = 110) -> str:
    """The first sentence of a module's docstring, RST backticks made Markdown, cut to ``most``
    characters at a word."""
    import re

    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    para = " ".join(doc.split("\n\n")[0].split())
    m = re.search(r"(?<![.][a-z])\.(\s|$)", para)
    text = (para[: m.start()] if m else para).replace("``", "`").strip()
    if len(text) > most:
        text = text[:most].rsplit(" ", 1)[0].rstrip(",;:") + " ..."
    return text


def layout_text() -> str:
    """The README's layout section: every package and every module with its docstring's first
    sentence."""
    import textwrap

    out = []
    for pkg in LAYOUT_PACKAGES:
        d = REPO / pkg
        head = _summary(d / "__init__.py", 200) if (d / "__init__.py").exists() else ""
        out.append(textwrap.fill(f"- `{pkg}/`: {head}", 100, subsequent_indent="  "))
        for p in sorted(d.glob("*.py")):
            if p.name != "__init__.py":
                out.append(textwrap.fill(f"  - `{p.name}`: {_summary(p)}", 100,
                                         subsequent_indent="    "))
    return "\n".join([BEGIN, *out, END])


def test_readme_layout_is_the_tree():
    text = (REPO / "README.md").read_text()
    assert BEGIN in text and END in text, "README lacks the generated layout section"
    got = text[text.index(BEGIN): text.index(END) + len(END)]
    assert got == layout_text(), "README's layout is stale: run `python -m tests.test_layout`"


if __name__ == "__main__":  # rewrite the README's layout section from the tree
    readme = REPO / "README.md"
    t = readme.read_text()
    readme.write_text(t[: t.index(BEGIN)] + layout_text() + t[t.index(END) + len(END):])
    print("README layout rewritten")


def test_the_row_is_declared_once():
    """No results-figure name is written as a literal in ``sweep/analysis`` or ``sweep/report``:
    they take it from ``sweep.common.row`` (zoo.counts' analytic names and the design fields are
    the model's own)."""
    from sweep.common import row as R

    names = {c for c, v in R.COLUMNS.items() if v.kind != "analytic"}
    names |= {R.spread(R.TIME[s], w) for s in R.STAGES for w in R.SPREADS}
    names |= {R.pred(s, k) for s in R.STAGES for k in (None, *R.PRED_KINDS)}
    names |= {R.error(s, k) for s in R.STAGES for k in ("calibrated", "roofline")}
    names |= {R.pred_module(s, m) for s in R.STAGES for m in R.MODULES}
    found = [f"{p.relative_to(REPO)}:{n.lineno} {n.value}"
             for pkg in ("sweep/analysis", "sweep/report") for p in sorted((REPO / pkg).glob("*.py"))
             for n in ast.walk(ast.parse(p.read_text()))
             if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in names]
    assert not found, found
    assert R.upgrade({"x": 1}) == {"x": 1}
    assert R.renamed(["decode_flops_attn", "x"]) == {"decode_flops_attn": "decode_flops_attention"}
    assert R.renamed(["decode_flops_attn", "decode_flops_attention"]) == {}  # today's wins
    R.RENAMES["old_tpot_ms"] = R.TIME["decode"]  # a record of another day loads under today's
    try:
        assert R.upgrade({"old_tpot_ms": 2.0}) == {R.TIME["decode"]: 2.0}
    finally:
        del R.RENAMES["old_tpot_ms"]


def test_one_percentile_definition():
    """Every percentile of the project is ``sweep.common.stats.percentile`` (numpy's default,
    Hyndman & Fan type 7): no module computes one its own way."""
    import re

    import numpy as np

    from sweep.common.stats import percentile
    from sweep.measure.timing import spread

    rng = np.random.default_rng(0)
    for n in (1, 2, 5, 10, 33):
        xs = rng.random(n).tolist()
        for q in (0, 10, 50, 90, 100):
            assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)), abs=1e-12)
        assert spread(xs)["p90"] == percentile(xs, 90)
    with pytest.raises(ValueError):
        percentile([1.0], 101)
    own = [f"{p.relative_to(REPO)}" for p in CODE
           if re.search(r"np\.(percentile|quantile)|\.quantile\(", p.read_text())]
    assert not own, own


def test_the_packaged_tree_is_the_source_tree():
    """``pyproject.toml`` lists its packages (conf/ is mapped to ``sweep.conf``): the list is every
    Python package of zoo/, kernels/ and sweep/ plus ``sweep.conf`` and the data folders, and the
    package data covers every file of conf/, so ``pip install .`` (not editable) ships what a
    source tree reads."""
    import fnmatch
    import tomllib

    from setuptools import find_packages

    st = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = set(find_packages(str(REPO), include=["zoo*", "kernels*", "sweep*"]))
    # the folders of data alone (no __init__.py) are listed too, so setuptools ships them
    # without a warning each: conf/'s groups, and the data folders of the package-data globs
    data = {f"sweep.conf.{d.name}" for d in (REPO / "conf").iterdir() if d.is_dir()}
    data |= {f"{pkg}.{g.split('/')[0]}" for pkg, gs in st["package-data"].items()
             if pkg != "sweep.conf" for g in gs if "/" in g}
    assert set(st["packages"]) == found | {"sweep.conf"} | data
    assert st["package-dir"] == {"sweep.conf": "conf"}
    globs = st["package-data"]["sweep.conf"]
    conf = REPO / "conf"
    missed = [str(p.relative_to(conf)) for p in conf.rglob("*") if p.is_file()
              and not any(fnmatch.fnmatch(str(p.relative_to(conf)), g) and
                          str(p.relative_to(conf)).count("/") == g.count("/") for g in globs)]
    assert not missed, f"conf/ files the package would leave out: {missed}"


def _literal_tuples(names: set[str]) -> list[str]:
    """Where a tuple, list or set of string literals holding every one of ``names`` is written in
    the package's code (``zoo``, ``kernels``, ``sweep``, ``bench``)."""
    found = []
    for pkg in ("zoo", "kernels", "sweep", "bench"):
        for p in sorted((REPO / pkg).rglob("*.py")):
            for n in ast.walk(ast.parse(p.read_text())):
                if isinstance(n, (ast.Tuple, ast.List, ast.Set)):
                    vals = {e.value for e in n.elts if isinstance(e, ast.Constant)}
                    if names <= vals:
                        found.append(f"{p.relative_to(REPO)}:{n.lineno}")
    return found


def test_the_module_kinds_and_design_keys_are_spelled_once():
    """The module kinds of a step are written down once (``zoo.counts.MODULES``: the counts, the
    predictor, the profiler's modules and the row read it), and a design's identity nowhere as a
    literal: every key list that tells designs apart holds the fields that set a figure beside
    the shape (``weight_dtype``, ``norm``) and comes from the dataclass
    (``zoo.config.DESIGN_FIELDS``). Display orders (a table's first columns) are not key lists."""
    from zoo import config

    where = _literal_tuples({"qkv", "out_proj", "ffn", "lm_head"})  # ["file:line"], one
    assert [w.split(":")[0] for w in where] == ["zoo/counts.py"], where
    assert _literal_tuples({"n_kv_heads", "head_dim", "weight_dtype"}) == []
    assert _literal_tuples({"n_kv_heads", "kv_dtype", "norm"}) == []
    assert {"weight_dtype", "norm", "qkv_bias", "kv_dtype"} <= set(config.DESIGN_FIELDS)


def test_results_hold_records_not_code():
    """``results/`` holds records (tables, logs, notes): the scripts that made them live in
    ``bench/`` (``bench/reference/``), where the import graph and the tests see them."""
    code = sorted(str(p.relative_to(REPO)) for p in (REPO / "results").rglob("*")
                  if p.suffix in (".py", ".sh"))
    assert code == [], code
