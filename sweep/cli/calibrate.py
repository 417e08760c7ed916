"""``python -m sweep.cli.calibrate [--refresh] [--again FAMILY ...] [--quick] [--ship]``:
calibrate the performance model on this device over the shipped grid: micro-benchmarks of the
kernels the zoo launches for every shipped model and experiment (``sweep.caches.calibration``), cached in
``<results_dir>/calibration/<device>.{json,parquet}``. A study calibrates only what it needs on
first use; this refreshes a whole one. ``--ship`` then copies it, and this device's autotune
choices (``<results_dir>/tuning``, merged with the shipped ones), into the package
(``sweep/analysis/calibrations/``, ``kernels/tuned/``): what a maintainer commits after measuring
a GPU. A calibration cut off by ``--timeout`` ships the entries it measured and their choices
(exit 1): the same command again, from them, measures the rest."""

from __future__ import annotations

import argparse
import shutil
import sys

from ..common.env import detect_device, work_path


def main(argv: list[str] | None = None) -> int:
    """The command line (the module's text); 0 once the calibration is written, 1 when it was cut
    off and, with ``--ship``, its measured part shipped.

    Raises:
        ValueError: ``--timeout`` (s) not above 0.
    """
    from kernels import tuning

    from ..analysis import calibration_store as store
    from ..caches import calibration as cal
    from ..caches.ceiling_cache import measure_ceilings
    from ..report.progress import TaskProgress
    from ..space import shipped_items

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--refresh", action="store_true", help="measure everything again")
    ap.add_argument("--again", nargs="+", default=[], choices=cal.AGAIN, metavar="FAMILY",
                    help="measure every entry of these families again (a family timed on a "
                    f"disturbed run): {', '.join(cal.AGAIN)}")
    ap.add_argument("--quick", action="store_true", help="the reduced grid (the CPU's)")
    ap.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    ap.add_argument("--results-dir", default="results", help="where the caches live")
    ap.add_argument("--timeout", type=float, default=1800.0,
                    help="s; a measurement cut off keeps the groups it finished (run again)")
    ap.add_argument("--ship", action="store_true",
                    help="copy the calibration and the autotune choices into the package")
    a = ap.parse_args(argv)
    if not a.timeout > 0:
        raise ValueError(f"--timeout={a.timeout}: seconds, more than 0")
    root = work_path(a.results_dir)
    dev = detect_device(a.device)
    with TaskProgress("measuring the device's ceilings") as bar:
        ceilings = measure_ceilings(dev, cache_dir=root / "ceilings", on_line=bar.on_line)
    cut = None
    try:
        with TaskProgress("calibration") as bar:
            got = cal.calibrate(dev, shipped_items(cpu=dev["type"] != "cuda"),
                                refresh=a.refresh, quick=a.quick or None, ceilings=ceilings,
                                cal_dir=root / "calibration", on_line=bar.on_line,
                                tuning_dir=root / "tuning", timeout_s=a.timeout,
                                again=tuple(a.again))
    except cal.CalibrationCut as e:  # with --ship, what it measured ships: run again for the rest
        if not a.ship:
            raise
        cut = e
        print(f"error: {e}; shipping them (run again for the rest)", file=sys.stderr)
    meta_p, tab_p = store.paths(dev["name"], root / "calibration")
    if cut is None:
        meta = got.meta
        print(f"{meta['device']}: {len(got.table)} entries ({meta['kinds']}), "
              f"{meta['measured_now']} measured now in {meta.get('wall_s')} s; {meta_p}")
    if a.ship:
        store.SHIPPED_DIR.mkdir(parents=True, exist_ok=True)
        for p in (meta_p, tab_p):
            shutil.copy(p, store.SHIPPED_DIR / p.name)
        tuned = root / "tuning" / f"{tuning.slug(dev['name'])}.json"
        if tuned.exists():  # merged: the choices of kernels not measured again are kept
            tuning.ship(tuned)
        print(f"shipped: {store.SHIPPED_DIR / meta_p.name}"
              + (f", {tuning.SHIPPED_DIR / tuned.name}" if tuned.exists() else ""))
    return 0 if cut is None else 1


if __name__ == "__main__":
    from ..common.entry import entry

    sys.exit(entry(main))
