"""``profile=modules``: the measured time per module kind, to check the performance model per module.

A light profile: one more child run of the trial's design, after its warm-up, with the model's
ranges (``zoo.nvtx``: ``qkv``, ``rope``, ``kv_write``, ``attention``, ``out_proj``, ``w13``,
``act``, ``w2``, ``norm``, ``lm_head``, ...) emitted as ``torch.profiler`` ``record_function``
ranges (``DESIGNZOO_NVTX=torch``). Every GPU kernel is attributed to the innermost range around
the host call that launched it (the runtime launch event with the kernel's correlation id), and
the range to a module kind of the performance model (``_module_of``): ``qkv``, ``attention``,
``out_proj``, ``ffn`` (the FFN GEMMs), ``lm_head``, ``norms_elementwise`` (norms, RoPE, KV write,
the activation, residual adds, embedding). In a GEMM range only GEMM kernels count for the GEMM's
module (a layout copy beside it is elementwise work).

Windows: the prefill, and one decode step. In ``cudagraph`` mode the step is profiled twice: run
eagerly with the ranges (same Python, same kernels as the captured graph) for the attribution,
and replayed as the graph for the kernel durations, matched kernel by kernel when the two kernel
sequences agree (else the eager durations, said in ``{stage}_modules_note``). On a CPU run there
are no kernels: host time of the ATen ops is attributed the same way (the CPU's analogue).

Row columns: ``{stage}_meas_ms_{module}`` (kernel time per module kind, ms), ``{stage}_meas_kernel_ms``
(their sum), ``{stage}_meas_unattributed_ms`` (kernels outside every range), ``{stage}_modules_note``.
The shares of the step and their comparison with the prediction are analysis
(``sweep.analysis.predict.module_check``).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from zoo.attn import ranges as attn_ranges
from zoo.counts import MODULES  # the module kinds, spelled once
from zoo.ffn import ranges as ffn_ranges

from ..common.atomic import write_json
from .child import child_failure, run_child


def _module_of() -> dict[str, str]:
    """Range -> module kind of every leaf range: each registered attention and FFN kind's
    (``zoo.attn``, ``zoo.ffn``: read when asked, so a kind registered later counts) and the LM
    head's."""
    return {**attn_ranges(), **ffn_ranges(), "lm_head": "lm_head"}


def _gemm_range(leaves: dict[str, str], r: str | None) -> bool:
    """Whether leaf range ``r`` is a linear layer's (only GEMM kernels count for its module)."""
    return leaves.get(r) not in (None, "norms_elementwise", "attention")


# gemv: kernels.gemv's _gemv_kernel; moe_up / moe_down: kernels.moe_gemm's grouped GEMMs (an
# H100 profile of +experiment=moe_vs_dense put every one of them in norms_elementwise); the MoE
# router's GEMM with its routing in one launch (kernels.moe_route)
_GEMM = re.compile(r"gemm|gemv|nvjet|cutlass|xmma|cublas|splitKreduce|sm90_|matmul|_mm_|"
                   r"addmm|linear|::(add)?b?mm\b|_moe_(up|down)_kernel|_router_route_kernel", re.I)
_LAUNCH = re.compile(r"Launch|cudaGraphLaunch", re.I)


def _is_range(name: str) -> bool:
    return (name in _module_of() or name in _GROUPS
            or (name.startswith("layer") and name[5:].isdigit()))


_ELEMENTWISE_LEAVES = {"rope", "kv_write", "norm"}  # leaf ranges of elementwise kernels
_GROUPS = _ELEMENTWISE_LEAVES | {"attn", "ffn", "prefill", "decode"}  # every other range


def module_of(ranges: list[str], kernel: str) -> str:
    """Module kind of a kernel named ``kernel`` launched inside ``ranges`` (outermost first): its
    innermost leaf range's (``_module_of``), ``norms_elementwise`` outside every leaf (residual
    adds, embedding) and for a non-GEMM kernel in a GEMM's range."""
    leaves = _module_of()
    inner = next((r for r in reversed(ranges) if r in leaves or r in _ELEMENTWISE_LEAVES), None)
    if _gemm_range(leaves, inner) and not _GEMM.search(kernel):
        return "norms_elementwise"
    return leaves.get(inner, "norms_elementwise")


def _enclosing(t: float, thread: int, spans: list[tuple[float, float, int, str]]) -> list[str]:
    """Names of the ranges on ``thread`` whose interval holds time ``t``, outermost first."""
    return [n for s, e, th, n in spans if th == thread and s <= t <= e]


def attribute(prof, cuda: bool) -> tuple[dict, list[tuple[str, str, float]]]:
    """Kernel time (us) per module kind in a finished ``torch.profiler.profile``.

    Args:
        prof: the profile, taken with the ``torch`` range backend on.
        cuda: GPU kernels (True) or, on a CPU run, the ATen ops' self CPU time.

    Returns:
        ``({module: us, "unattributed": us}, [(kernel name, module, us), ...] in launch order)``.
    """
    from torch.autograd import DeviceType

    evs = list(prof.events())
    spans = sorted(((e.time_range.start, e.time_range.end, e.thread, e.name) for e in evs
                    if e.device_type == DeviceType.CPU and _is_range(e.name)),
                   key=lambda x: (x[0], -x[1]))
    out = dict.fromkeys(MODULES, 0.0)
    out["unattributed"] = 0.0
    seq = []
    if cuda:
        launch, front = {}, {}
        for e in evs:
            if e.device_type == DeviceType.CPU:
                (launch if _LAUNCH.search(e.name) else front).setdefault(e.id, e)
        # the ranges' own GPU-side marks (torch.profiler's user annotations on the GPU
        # timeline, named like the range) are not kernels
        kernels = sorted((e for e in evs if e.device_type == DeviceType.CUDA
                          and not _is_range(e.name)), key=lambda e: e.time_range.start)
        for k in kernels:
            dur = k.time_range.end - k.time_range.start
            # the host call that launched it: the runtime launch event of its correlation id,
            # else the torch op it is linked to
            rt = launch.get(k.id) or front.get(getattr(k, "linked_correlation_id", 0) or -1)
            if rt is None:
                out["unattributed"] += dur
                seq.append((k.name, "unattributed", dur))
                continue
            m = module_of(_enclosing(rt.time_range.start, rt.thread, spans), k.name)
            out[m] += dur
            seq.append((k.name, m, dur))
        return out, seq
    for e in evs:  # CPU run: the ATen ops' own host time
        if e.device_type != DeviceType.CPU or _is_range(e.name) or not e.name.startswith("aten::"):
            continue
        m = module_of(_enclosing(e.time_range.start, e.thread, spans), e.name)
        out[m] += e.self_cpu_time_total
        seq.append((e.name, m, e.self_cpu_time_total))
    return out, seq


def align_replay(seq: list[tuple[str, str, float]], replay: list[tuple[str, float]],
                 eager_us: dict) -> tuple[dict, str | None]:
    """Kernel time per module (us) from a graph replay's kernels, attributed through the eager
    run of the captured Python.

    Args:
        seq: the eager run's ``(kernel name, module, us)`` in launch order (``attribute``);
        replay: the replay's ``(kernel name, us)`` in start order (the step's own small kernels
            around the graph included); eager_us: the eager run's ``{module: us}``.

    Returns:
        ``({module: us}, note)``: where the eager sequence appears whole in the replay, its
        kernels' replay durations and note ``""``; else the two sequences aligned by name
        (``difflib``): equal kernels and renamed ones (a library choosing another kernel
        variant under capture) take the eager kernel's module in order (extra ones in a renamed
        run take the run's last), a replay kernel with no counterpart takes the module of the
        eager kernel before it, and the note says
        how many kernels matched by name. ``(eager_us, None)`` when under half matched.
    """
    import difflib

    names = [k for k, _, _ in seq]
    rnames = [k for k, _ in replay]
    if not names:
        return eager_us, None
    at = next((i for i in range(len(rnames) - len(names) + 1)
               if rnames[i:i + len(names)] == names), None)
    us = dict.fromkeys(eager_us, 0.0)
    if at is not None:
        for (_, m, _), (_, d) in zip(seq, replay[at:at + len(names)]):
            us[m] += d
        return us, ""
    sm = difflib.SequenceMatcher(None, names, rnames, autojunk=False)
    same = sum(b.size for b in sm.get_matching_blocks())
    if same < len(names) / 2:
        return eager_us, None
    blocks = sm.get_matching_blocks()
    first, last = blocks[0].b, blocks[-2].b + blocks[-2].size  # the graph inside the replay
    renamed = 0
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        for j in range(max(j1, first), min(j2, last)):
            if tag in ("equal", "replace"):  # extra replay kernels take the span's last module
                i = i1 + min(j - j1, i2 - i1 - 1)
                renamed += tag == "replace"
            else:  # inserted: the module of the eager kernel before it
                i = max(i1 - 1, 0)
            us[seq[i][1]] += replay[j][1]
    return us, (f"{same} of {len(names)} kernels matched by name, {renamed} renamed; e.g. "
                + ", ".join(f"{names[i1]} -> {rnames[j1]}" for tag, i1, _, j1, _ in
                            sm.get_opcodes() if tag == "replace")[:300])


def _columns(stage: str, us: dict, note: str = "") -> dict:
    p = f"{stage}_"
    out = {f"{p}meas_ms_{m}": us[m] / 1e3 for m in MODULES}
    out[p + "meas_kernel_ms"] = sum(us[m] for m in MODULES) / 1e3
    out[p + "meas_unattributed_ms"] = us["unattributed"] / 1e3
    if note:
        out[p + "modules_note"] = note
    return out


def module_windows(gen, prompt, spec: dict) -> dict:
    """Child side of ``profile.modules``: the prefill and one decode step under torch.profiler
    with the model's ranges as ``record_function`` ranges; returns the row's columns.

    Args:
        gen: a ``zoo.Generator`` (its mode is the trial's); prompt: ``[B, T]`` token ids;
        spec: the trial spec.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    from zoo import nvtx

    cuda = spec["device"] == "cuda"
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    tok = gen.prefill(prompt).argmax(-1, keepdim=True)
    for _ in range(3):  # warm-up: graphs captured, allocator settled
        tok = gen.decode(tok).argmax(-1, keepdim=True)
    sync()

    def ranged(eager, replay, graph: bool, stage: str):
        """Kernel time per module (us) of ``eager()`` run under the ranges; where the stage runs
        as a CUDA graph, the kernel durations of ``replay()`` matched kernel by kernel. Both
        kernel lists go to ``<trial_dir>/kernels_<stage>.json`` (what the match saw), with each
        replayed kernel's start (us from the replay's first: the gaps between them)."""
        nvtx.enable(True, "torch")
        with profile(activities=acts) as p:
            eager()
            sync()
        us, seq = attribute(p, cuda)
        if not graph:
            return us, ""
        nvtx.enable(False)
        with profile(activities=acts) as p2:
            replay()
            sync()
        kernels = sorted((e for e in p2.events() if e.device_type.name == "CUDA"),
                         key=lambda e: e.time_range.start)
        rep = [(e.name, e.time_range.end - e.time_range.start) for e in kernels]
        if spec.get("trial_dir"):  # the replay's starts (us from its first kernel): its gaps
            t0 = kernels[0].time_range.start if kernels else 0
            write_json(Path(spec["trial_dir"]) / f"kernels_{stage}.json",
                       {"eager": [list(k) for k in seq], "replay": [list(k) for k in rep],
                        "replay_start_us": [e.time_range.start - t0 for e in kernels]})
        us, matched = align_replay(seq, rep, us)
        if matched is None:
            return us, ("the graph replay's kernels did not match the eager run's: eager kernel "
                        "durations")
        return us, ("kernel durations from the graph replay, attributed through an eager run"
                    + (f" ({matched})" if matched else ""))

    try:
        # the captured prefill's Python run eagerly: the same kernels, with ranges
        us, note = ranged(lambda: gen.prefill_step(prompt), lambda: gen.prefill(prompt),
                          gen.prefill_mode == "cudagraph", "prefill")
        out = _columns("prefill", us, note)
        gen.pos = prompt.shape[1]  # the cache holds the prompt: decode from there again
        for _ in range(3):
            tok = gen.decode(tok).argmax(-1, keepdim=True)
        sync()

        def eager_step():
            if gen.mode == "eager":
                gen.decode(tok)
                return
            gen._token.copy_(tok)  # the captured step's Python run eagerly
            gen._input_pos.fill_(gen.pos)
            gen._step(gen._bucket(gen.pos))

        us, note = ranged(eager_step, lambda: gen.decode(tok), gen.mode == "cudagraph", "decode")
        if gen.mode == "compile":
            note = "compile mode: the eager step's kernels (Inductor's own are not attributed)"
        out.update(_columns("decode", us, note))
        out["decode_modules_cache_len"] = gen.pos
    finally:
        nvtx.enable(False)
    return out


def wanted(profile: dict) -> bool:
    """Whether the trial's ``profile`` asks for the per-module times."""
    return bool(profile.get("modules"))


def profile_trial(spec: dict, trial_dir: Path, cfg, workload: dict, ceilings: dict) -> dict:
    """``profile.modules`` in one more child run (``<trial_dir>/modules/``); ``modules_reason`` on
    failure, and NaN module columns. Arguments as ``sweep.measure.ncu.profile_trial``."""
    d = trial_dir / "modules"
    d.mkdir(parents=True, exist_ok=True)
    child = dict(spec, profile_window="modules", trial_dir=str(d),
                 env=dict(spec.get("env", {}), DESIGNZOO_NVTX="0"))
    res = run_child(child, d, workload.get("timeout_s", 900.0))
    if res.get("status") != "ok":
        out = {f"{st}_meas_ms_{m}": math.nan for st in ("prefill", "decode") for m in MODULES}
        out["modules_reason"] = child_failure(res)[:600]
        return out
    return dict(res["measured"])
