"""One measured trial, run in its own child process: ``python -m sweep.measure.trial SPEC.json RESULT.json``.

The child builds the design (random weights, or a checkpoint), warms up, times prefill (TTFT) and
decode (TPOT) and writes one JSON result. An OOM, a CUDA error or a crash touches this process only;
the parent (``sweep.study``) records the failure and goes on. A profiler can wrap this command.

Spec (JSON)::

    {"model": {ModelConfig fields}, "workload": {"batch", "prompt_len", "new_tokens", "warmup",
     "repeats"}, "device": "cuda"|"cpu", "mode": "eager"|"cudagraph"|"compile", "seed": int,
     "weights": null | checkpoint path,
     "fault": null | "WHERE:KIND" (KIND: raise|oom|hostoom|crash|hang|nan|compile)}

Result (JSON): ``{"status": "ok", "measured": {...}, "env": {...}}`` or
``{"status": "error", "error_type": "OOM"|"CUDA error"|"invalid design"|"NaN logits"|...,
"error": message}``. ``fault`` injects a failure for the fault-tolerance tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

from ..common.atomic import write_json
from ..common.env import cpu_threads
from .window import options, profiled_window


class NaNLogits(RuntimeError):
    """The model produced non-finite logits."""


def _inject(fault: str | None, where: str) -> None:
    if not fault or not fault.startswith(where):
        return
    import torch

    kind = fault.split(":")[-1]
    if kind == "raise":
        raise RuntimeError("injected fault")
    if kind == "hostoom":  # a real allocation the host cannot give (1 PiB)
        torch.empty(1 << 50, dtype=torch.uint8)
    if kind == "oom":
        raise torch.OutOfMemoryError("injected: CUDA out of memory. Tried to allocate 1.00 GiB")
    if kind == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "hang":
        time.sleep(1e6)
    if kind == "compile":
        from .faults import launch_broken

        launch_broken("cuda" if torch.cuda.is_available() else "cpu")


def decode_linear_path(model, batch: int, mode: str) -> str:
    """How the measured decode step ran its linear layers: per layer the Triton GEMV (``triton``,
    ``kernels.gemv``) or ``cublas``, as ``kernels.decode_linear`` chose by timing both, or the
    path taken instead and why (``Transformer.skinny_ok``)."""
    from kernels.gemv import MAX_M

    cfg = model.cfg
    if cfg.kernels != "triton":
        return f"torch GEMMs (kernels={cfg.kernels})"
    # mode=compile traces the same path: the kernels enter as custom ops (kernels.ops)
    if batch > MAX_M:
        return f"cuBLAS GEMMs (batch {batch} > {MAX_M}, the most rows of the GEMV path)"
    if cfg.norm != "rmsnorm":
        return f"cuBLAS GEMMs (norm={cfg.norm}; the GEMV prologue is RMSNorm)"
    from kernels.decode_linear import chosen
    from zoo import attn as attn_kinds

    attn, ffn = model.layers[0].attention, model.layers[0].feed_forward
    layers = {**{name: (lin, pro) for name, lin, pro in
                 attn_kinds.kind(cfg).decode_linears(attn) + ffn.kind.decode_linears(ffn)},
              "lm_head": (model.output, "norm")}
    return ", ".join(f"{name} {chosen(batch, lin.weight, pro) or 'triton (not timed)'}"
                     for name, (lin, pro) in layers.items())


def measure(spec: dict) -> dict:
    """Build the design in ``spec`` and time prefill and decode. Returns the ``measured`` dict.

    Keys (times in ms, rates in tokens/s, memory in bytes): ``ttft_ms`` (median prefill + first
    token), ``ttft_ms_min``/``_p90``; ``decode_tpot_ms`` (median over repeats of the mean time per
    decode step), ``decode_tpot_ms_min``/``_p90``, ``decode_step_ms_median`` (median single step);
    ``prefill_tok_s``, ``decode_tok_s``; ``peak_mem_bytes``, ``weights_alloc_bytes``,
    ``kv_cache_alloc_bytes``; ``build_s`` (the model built), ``compile_s`` (the first prefill and
    decode loop: kernels compiled or tuned, graphs captured), ``measure_s`` (the rest of the
    warm-up and the timed repeats), in s; ``decode_linear`` (``decode_linear_path``). With
    ``profile.nvml``: ``{prefill,decode}_energy_j``, ``_avg_power_w``, ``_j_per_token`` over the
    timed repeats (``sweep.measure.nvml``), and the sampled time series in
    ``<trial_dir>/nvml.csv``. On a GPU: the allocator's figures
    (``torch_prof.allocator_stats``), and with ``options.memory_snapshot`` the allocator history
    in ``<trial_dir>/memory_snapshot.pickle``.

    Raises:
        DesignError, torch.OutOfMemoryError, RuntimeError, NaNLogits: classified by ``main``.
    """
    import torch

    from kernels import switches, tuning
    from zoo import Generator, ModelConfig, Transformer
    from zoo.weights import load_hf_weights

    from .child import progress_line
    from .moe_routing import routing_stats
    from .timing import Timer, spread

    fault = spec.get("fault")
    _inject(fault, "start")
    device = spec["device"]
    switches.set_current(switches.Switches.from_dict(spec.get("switches")))
    if spec.get("tuning_dir"):
        tuning.configure(spec["tuning_dir"])
    wl = spec["workload"]
    B, T, N = wl["batch"], wl["prompt_len"], wl["new_tokens"]
    cfg = ModelConfig.from_dict(spec["model"])
    torch.manual_seed(spec.get("seed", 0))
    if device == "cpu":  # the cores this process may use, said in the row (torch_threads)
        torch.set_num_threads(cpu_threads())
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        if options(spec).get("memory_snapshot"):
            # the allocator's history for https://pytorch.org/memory_viz
            torch.cuda.memory._record_memory_history(max_entries=200_000)
    progress_line("phase", "building the model")
    t0 = time.perf_counter()
    model = Transformer.build(cfg, device, seed=spec.get("seed", 0), init=not spec.get("weights"))
    if spec.get("weights"):
        load_hf_weights(model, spec["weights"])
    if fault and fault.endswith(":nan"):
        with torch.no_grad():
            model.norm.weight.fill_(float("nan"))
    skew, uniform = wl.get("routing_skew", 0.0), wl.get("routing", "router") == "uniform"
    if skew or uniform:  # each token's experts drawn from the workload's Zipf prior (zoo.routing;
        from zoo.experts import set_routing_skew  # uniform: exponent 0)

        set_routing_skew(model, skew, draw=uniform)
    gen = Generator(model, B, T + N, spec.get("mode", "eager"))
    build_s = time.perf_counter() - t0
    _inject(fault, "measure")

    g = torch.Generator(device=device).manual_seed(spec.get("seed", 0) + 1)
    prompt = torch.randint(0, cfg.vocab_size, (B, T), device=device, generator=g)
    if spec.get("profile_window") == "torch":
        from .torch_prof import torch_windows

        return torch_windows(gen, prompt, spec)
    if spec.get("profile_window") == "modules":
        from .modules import module_windows

        return module_windows(gen, prompt, spec)
    if spec.get("profile_window"):
        return profiled_window(gen, prompt, spec)
    timer = Timer(device)
    state = {}

    def prefill():
        state["tok"] = gen.prefill(prompt).argmax(-1, keepdim=True)

    prof = spec.get("profile") or {}
    opts = options(spec)
    trial_dir = Path(spec["trial_dir"]) if spec.get("trial_dir") else None
    sampler = None
    if prof.get("nvml"):
        from .nvml import NvmlSampler

        sampler = NvmlSampler(interval_s=opts.get("nvml_interval_s", 0.02))
    region = sampler.region if sampler else (lambda name: contextlib.nullcontext())
    # a graph is captured on its first call: never inside the timed repeats. The first prefill
    # and decode loop compile the kernels (Triton: from its cache, or tuned once per shape and
    # device, kernels.tuning) and capture the graphs: compile_s; the timed repeats: measure_s
    warmup = max(wl["warmup"], 1) if gen.mode != "eager" else wl["warmup"]
    t_compile = time.perf_counter()
    progress_line("phase", "compiling kernels, capturing graphs (prefill)")
    timer.repeat(prefill, min(warmup, 1), 0)
    compile_s = time.perf_counter() - t_compile
    progress_line("phase", "measuring prefill")
    t_measure = time.perf_counter()
    timer.repeat(prefill, max(warmup - 1, 0), 0)
    with region("prefill"):
        ttft = timer.repeat(prefill, 0, wl["repeats"])
    first = state["tok"]
    logits = gen.prefill(prompt)
    if not torch.isfinite(logits).all():
        raise NaNLogits("prefill produced non-finite logits")

    def step():  # the step and its greedy sample, as generation runs it (one graph launch)
        state["tok"] = gen.decode_greedy(state["tok"])

    steps = max(N - 1, 1)
    per_repeat, per_step = [], []

    def decode_loop():
        gen.pos, state["tok"] = T, first
        return timer.steps([step] * steps)

    measure_s = time.perf_counter() - t_measure
    progress_line("phase", "compiling kernels, capturing graphs (decode)")
    t_compile = time.perf_counter()
    if warmup:
        decode_loop()
    compile_s += time.perf_counter() - t_compile
    progress_line("phase", "measuring decode")
    t_measure = time.perf_counter()
    for _ in range(warmup - 1):
        decode_loop()
    with region("decode"):
        for _ in range(wl["repeats"]):
            ts = decode_loop()
            per_repeat.append(sum(ts) / steps)
            per_step.extend(ts)
    if not torch.isfinite(gen.last_logits).all():
        raise NaNLogits("decode produced non-finite logits")
    measure_s += time.perf_counter() - t_measure
    tuning.save()  # the shapes tuned here are never tuned again on this device
    routed = routing_stats(gen, prompt, first, skew)  # after the timed runs: eager, recorded

    s_ttft, s_tpot, s_step = spread(ttft), spread(per_repeat), spread(per_step)
    out = {
        "ttft_ms": 1e3 * s_ttft["median"], "ttft_ms_min": 1e3 * s_ttft["min"],
        "ttft_ms_p90": 1e3 * s_ttft["p90"],
        "decode_tpot_ms": 1e3 * s_tpot["median"], "decode_tpot_ms_min": 1e3 * s_tpot["min"],
        "decode_tpot_ms_p90": 1e3 * s_tpot["p90"],
        "decode_step_ms_median": 1e3 * s_step["median"],
        "decode_step_ms_p10": 1e3 * s_step["p10"], "decode_step_ms_p90": 1e3 * s_step["p90"],
        "prefill_tok_s": B * T / s_ttft["median"],
        "decode_tok_s": B / s_tpot["median"],
        "repeats": wl["repeats"], "decode_steps": steps, "prefill_mode": gen.prefill_mode,
        "weights_alloc_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "kv_cache_alloc_bytes": gen.model.cache.nbytes(),
        "build_s": build_s, "compile_s": compile_s, "measure_s": measure_s,
        "decode_linear": decode_linear_path(model, B, gen.mode),
        "torch_threads": torch.get_num_threads(),
        **routed,
    }
    if sampler is not None:
        out.update(sampler.summary({"prefill": B * T * wl["repeats"],
                                    "decode": B * steps * wl["repeats"]}))
        if trial_dir and sampler.samples:
            sampler.write_csv(trial_dir / "nvml.csv")
    if device == "cuda":
        from .torch_prof import allocator_stats

        out["peak_mem_bytes"] = torch.cuda.max_memory_allocated()
        out["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
        out.update(allocator_stats())
        if opts.get("memory_snapshot") and trial_dir:
            torch.cuda.memory._dump_snapshot(str(trial_dir / "memory_snapshot.pickle"))
            torch.cuda.memory._record_memory_history(enabled=None)
            out["memory_snapshot"] = str(trial_dir / "memory_snapshot.pickle")
    else:
        import resource

        out["peak_mem_bytes"] = float("nan")
        out["peak_mem_bytes_reason"] = "CPU run: no allocator peak (see peak_rss_bytes" + (
            ", of a child forked from the fork server: the pages of its imports that it never "
            "touched are not counted, about 90 MB less than a new interpreter's)"
            if os.environ.get("DESIGNZOO_FORKED") == "1" else ")")
        out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return out


def classify(exc: BaseException) -> str:
    """Short failure class for an exception raised by ``measure``."""
    import torch

    from zoo import DesignError

    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or (
            isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)):
        return "OOM"  # the GPU allocator's, Python's, or the CPU allocator's (DefaultCPUAllocator)
    if isinstance(exc, DesignError):
        return "invalid design"
    if isinstance(exc, NaNLogits):
        return "NaN logits"
    name = type(exc).__name__
    if "CUDA" in str(exc) or "cuda" in name.lower():
        return "CUDA error"
    if "triton" in type(exc).__module__ or name in ("CompilationError", "CompileTimeAssertionFailure"):
        return "kernel compile error"
    return "exception"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m sweep.measure.trial SPEC.json RESULT.json", file=sys.stderr)
        return 2
    from .parent import watch_parent

    watch_parent()  # a trial never outlives the study (or worker) that started it
    spec = json.loads(Path(argv[0]).read_text())
    from ..common.env import detect_device, environment

    dev = detect_device(spec["device"])
    try:
        measured = measure(spec)
        result = {"status": "ok", "measured": measured}
        code = 0
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a recorded reason
        if isinstance(exc, KeyboardInterrupt):
            raise
        result = {"status": "error", "error_type": classify(exc),
                  "error": f"{type(exc).__name__}: {exc}"[:2000],
                  "traceback": traceback.format_exc()[-4000:]}
        code = 1
    result["env"] = environment(dev)
    write_json(argv[1], result)
    return code


if __name__ == "__main__":
    sys.exit(main())
