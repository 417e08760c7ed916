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
    for pkg in ("sweep/analysis", "sweep/report", "sweep/measure"):
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
                       "sweep.report")),
    ("sweep.analysis", ("sweep.study", "sweep.objective", "sweep.plan", "sweep.report")),
    ("sweep.report", ("sweep.study", "sweep.objective", "sweep.plan", "sweep.measure")),
    ("zoo", ("sweep",)),
    ("kernels", ("sweep", "zoo")),
])
def test_imports_go_downward(pkg, forbidden):
    bad = {m: sorted(i for i in deps if i.startswith(forbidden))
           for m, deps in GRAPH.items() if m == pkg or m.startswith(pkg + ".")}
    assert not {m: d for m, d in bad.items() if d}


def test_objective_calls_each_profiler_once():
    text = (REPO / "sweep/objective.py").read_text() + (REPO / "sweep/study.py").read_text()
    for name in ("_ncu", "_nsys", "_torch"):
        assert name not in text
