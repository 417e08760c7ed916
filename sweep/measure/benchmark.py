"""Decode-speed benchmark of the zoo against Hugging Face ``transformers``, in one process on one GPU.

``python -m sweep.cli.bench --out results/reference/bench_<device>.json [--group all|small|large|kv|kernels]``

Cases (prompt 512, 128 new tokens unless noted):
- ``small``: Llama-3.2-1B shape, batch 1 and 8; ``large``: Llama-3.1-8B shape, batch 1 and 8. The
  zoo in each mode (eager, cudagraph, compile) and kernels choice (torch, triton), and the peer:
  transformers' eager ``generate`` (random weights, same config, SDPA attention).
- ``kv``: the KV-dominated case: Llama-3.2-1B shape, batch 64, 8192-token prompt, kv_dtype bf16 /
  int8 / fp8_e4m3 (cudagraph + triton); ``kv_error`` (run as its own process): the logits' error
  of the quantized caches against the bf16 cache over 64 decode steps (max abs, mean KL).
- ``nvtx``: the decode step's cost of the NVTX ranges (``zoo.nvtx``) with no profiler attached:
  Llama-3.2-1B shape, batch 1, eager (a Python call per range per layer: the worst case) and
  cudagraph, ranges off and on in alternating rounds; the target is < 2% (profiling issue).
- ``prefill``: TTFT of the Llama-3.2-1B and Llama-3.1-8B shapes at batch 1, prompts 512 and 2048
  (cudagraph; Triton and torch kernels), with the prefill's matmul FLOPs (``zoo.counts``) over
  TTFT against the bf16 GEMM ceiling measured in the same run (``mfu_vs_measured_gemm``).
- ``gemv``: each decode GEMV shape of both models (M = 1 and 8; plain, norm and SwiGLU prologues)
  on ``kernels.gemv`` and on cuBLAS (after the prologue's own kernel), the faster one marked, as
  the decode path picks it.
- ``kernels``: each Triton kernel against its DRAM roofline (minimum bytes / measured copy
  bandwidth) and the torch eager op it replaces; decode attention against
  ``scaled_dot_product_attention`` on the same inputs.

Every case row: ``case, model, batch, prompt_len, context_len, mode, kernels, kv_dtype,
decode_tok_s, tpot_ms, ttft_ms, mbu_vs_measured, peer_decode_tok_s, zoo_over_peer``. MBU is the
analytic minimum bytes per decode step (``zoo.counts``) over TPOT, against the copy bandwidth
measured in the same run. Results are appended case by case, so a killed run keeps what it did.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

from kernels import switches
from zoo import Generator, ModelConfig, Transformer, counts

from ..common.atomic import write_json
from ..common.env import NoDevice, detect_device, environment
from .benchmark_kernels import gemv_rows, kernel_rows, nvtx_overhead
from .ceilings import _copy_rate, _gemm_rate
from .timing import Timer
from .trial import measure

SHAPES = {"small": "llama3_2_1b", "large": "llama3_1_8b"}


def _free():
    gc.collect()
    torch.cuda.empty_cache()


def zoo_case(model: str, batch: int, prompt: int, new: int, mode: str, kernels: str,
             kv_dtype: str, copy_bw: float, warmup: int, repeats: int) -> dict:
    """Measure one zoo configuration with the same code a sweep trial uses (``sweep.measure.trial``)."""
    cfg = ModelConfig.from_name(model, kernels=kernels, kv_dtype=kv_dtype)
    spec = {"model": cfg.to_dict(), "device": "cuda", "mode": mode, "seed": 0,
            "switches": switches.current().to_dict(),
            "workload": {"batch": batch, "prompt_len": prompt, "new_tokens": new,
                         "warmup": warmup, "repeats": repeats}}
    m = measure(spec)
    _free()
    dec = counts.decode_mean(cfg, batch, prompt, new)
    return {"decode_tok_s": m["decode_tok_s"], "tpot_ms": m["decode_tpot_ms"],
            "tpot_ms_min": m["decode_tpot_ms_min"], "tpot_ms_p90": m["decode_tpot_ms_p90"],
            "ttft_ms": m["ttft_ms"], "decode_min_bytes": dec.min_bytes,
            "mbu_vs_measured": dec.min_bytes / (m["decode_tpot_ms"] / 1e3) / copy_bw,
            "peak_mem_bytes": m["peak_mem_bytes"], "decode_linear": m.get("decode_linear", ""),
            "switches": switches.current().to_dict()}


def peer_case(model: str, batch: int, prompt: int, new: int, repeats: int) -> dict:
    """transformers' eager generate on random weights of the same config: TTFT from a 1-token
    generate, TPOT from the rest of a ``new``-token generate (greedy, ``min_new_tokens=new``)."""
    import transformers

    cfg = ModelConfig.from_name(model)
    hf_cfg = transformers.AutoConfig.for_model(**cfg.to_hf())
    with torch.device("cuda"):
        hf = transformers.AutoModelForCausalLM.from_config(hf_cfg, torch_dtype=torch.bfloat16,
                                                           attn_implementation="sdpa").eval()
    ids = torch.randint(0, cfg.vocab_size, (batch, prompt), device="cuda")
    mask = torch.ones_like(ids)

    def gen(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = hf.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                              do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
        assert out.shape[1] == prompt + n
        return time.perf_counter() - t0

    gen(4)  # warm-up
    ttft = statistics.median(gen(1) for _ in range(repeats))
    total = statistics.median(gen(new) for _ in range(repeats))
    _free()
    tpot = (total - ttft) / (new - 1)
    return {"peer_decode_tok_s": batch / tpot, "peer_tpot_ms": 1e3 * tpot,
            "peer_ttft_ms": 1e3 * ttft, "peer": f"transformers {transformers.__version__} eager "
            "generate, sdpa attention, DynamicCache"}


def kv_error(batch: int, prompt: int, steps: int, kv_dtypes: list[str]) -> dict:
    """Logits error of quantized-KV decode against the bf16-KV decode, same weights and tokens.

    Each path prefills the same prompt and is fed the same random tokens; per step, the max
    |log-prob difference| over batch and vocabulary and KL(p_bf16 || p_quant) (nats) averaged over
    the batch. Returns per dtype ``{"max_abs_logprob_diff", "mean_kl", "max_kl_step", "steps"}``.
    """
    cfg = ModelConfig.from_name("llama3_2_1b", kernels="triton")
    g = torch.Generator("cuda").manual_seed(3)
    prompt_ids = torch.randint(0, cfg.vocab_size, (batch, prompt), device="cuda", generator=g)
    toks = torch.randint(0, cfg.vocab_size, (steps, batch, 1), device="cuda", generator=g)

    def run(kv_dtype: str):
        gen = Generator(Transformer.build(cfg.replace(kv_dtype=kv_dtype), "cuda", seed=0), batch,
                        prompt + steps + 1, "cudagraph")
        gen.prefill(prompt_ids)
        for s in range(steps):
            yield gen.decode(toks[s]).float().log_softmax(-1)

    ref = [lp.to(torch.bfloat16).cpu() for lp in run("bf16")]  # log-probs, bf16-KV path
    _free()
    out = {}
    for kvd in kv_dtypes:
        max_abs, kls = 0.0, []
        for s, lq in enumerate(run(kvd)):
            lr = ref[s].to(lq.device).float()
            max_abs = max(max_abs, (lq - lr).abs().max().item())
            kls.append((lr.exp() * (lr - lq)).sum(-1).mean().item())
        out[kvd] = {"max_abs_logprob_diff": max_abs, "mean_kl": statistics.mean(kls),
                    "max_kl_step": max(kls), "steps": steps}
        _free()
    return out


def prefill_case(model: str, prompt: int, kernels: str, gemm_flops: float) -> dict:
    """TTFT (median of the trial's repeats) of a batch-1 prefill and its MFU against the GEMM
    ceiling measured in the same run: matmul FLOPs of the prefill / TTFT / ceiling."""
    out = zoo_case(model, 1, prompt, 2, "cudagraph", kernels, "bf16", float("nan"), 2, 5)
    cfg = ModelConfig.from_name(model)
    fl = counts.prefill(cfg, 1, prompt).matmul_flops
    return {"ttft_ms": out["ttft_ms"], "prefill_matmul_flops": fl,
            "prefill_tflops": fl / (out["ttft_ms"] / 1e3) / 1e12,
            "mfu_vs_measured_gemm": fl / (out["ttft_ms"] / 1e3) / gemm_flops}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--group", default="all",
                    choices=["all", "small", "large", "kv", "kv_error", "kernels", "nvtx", "prefill",
                             "gemv"])
    ap.add_argument("--batches", default="1,8", help="batches of the small/large groups")
    ap.add_argument("--no-peer", action="store_true",
                    help="small/large without transformers' generate (a lever's before/after)")
    ap.add_argument("--variants", default="",
                    help="comma-separated mode-kernels of the small/large groups to run (e.g. "
                         "cudagraph-triton,cudagraph-torch,compile-torch); default all")
    ap.add_argument("--switch", action="append", default=[], metavar="NAME=true|false",
                    help="a kernel switch (kernels.switches; e.g. rope_in_attention=false), "
                         "recorded in each case; repeat for several")
    ap.add_argument("--command", default=" ".join(["python -m sweep.cli.bench"] + sys.argv[1:]))
    a = ap.parse_args(argv)
    try:
        given = {}
        for item in a.switch:
            name, _, value = item.partition("=")
            if value not in ("true", "false"):
                raise ValueError(f"--switch {item!r}: give NAME=true or NAME=false")
            given[name] = value == "true"
        switches.set_current(switches.Switches.from_dict(given))
    except ValueError as e:
        ap.error(str(e))
    if not torch.cuda.is_available():
        raise NoDevice("sweep.cli.bench measures on a CUDA GPU; none is visible here")
    dev = detect_device("cuda")
    out = Path(a.out)
    rec = json.loads(out.read_text()) if out.exists() else {
        "device": dev["name"], "versions": {}, "command": a.command, "date": None,
        "ceilings": {}, "cases": [], "kernels": [], "kv_error": {}}
    env = environment(dev)
    rec["versions"] = {k: env[k] for k in ("torch", "triton", "cuda", "python", "driver")}
    rec["git_sha"] = env["git_sha"]
    rec["date"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    timer = Timer("cuda")
    ceil = _copy_rate(timer, 1 << 30, "cuda") | _gemm_rate(timer, 8192, "bf16", "cuda")
    rec["ceilings"] = ceil
    bw = ceil["copy_bytes_s"]
    print(f"measured copy {bw / 1e12:.2f} TB/s, bf16 GEMM {ceil['gemm_flops_bf16'] / 1e12:.0f} "
          "TFLOP/s", flush=True)

    def save():
        write_json(out, rec)

    def add(case: dict, fn):
        t0 = time.time()
        try:
            case.update(fn())
        except Exception as e:  # noqa: BLE001 - a failed case is recorded, the bench goes on
            case["error"] = f"{type(e).__name__}: {e}"[:500]
            case["traceback"] = traceback.format_exc()[-1500:]
            _free()
        case["wall_s"] = round(time.time() - t0, 1)
        rec["cases"] = [c for c in rec["cases"] if c["case"] != case["case"]] + [case]
        save()
        show = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in case.items()
                if k in ("case", "decode_tok_s", "tpot_ms", "ttft_ms", "mbu_vs_measured",
                         "peer_decode_tok_s", "zoo_over_peer", "error")}
        print(show, flush=True)

    groups = ["small", "large", "kv", "kernels"] if a.group == "all" else [a.group]
    for grp in groups:
        if grp in SHAPES:
            model = SHAPES[grp]
            for batch in (int(b) for b in a.batches.split(",")):
                base = {"model": model, "batch": batch, "prompt_len": 512, "new_tokens": 128,
                        "context_len": 640}
                peer = {}
                if not a.no_peer:
                    add(dict(base, case=f"{model}-b{batch}-peer", mode="eager", kernels="hf",
                             kv_dtype="bf16", impl="transformers"),
                        lambda b=batch: (peer.update(peer_case(model, b, 512, 128, 3)) or peer))
                variants = [("eager", "torch"), ("cudagraph", "torch"), ("cudagraph", "triton"),
                            ("eager", "triton")] + ([("compile", "torch")] if batch == 1 else [])
                if a.variants:
                    variants = [v for v in variants if "-".join(v) in a.variants.split(",")]
                for mode, kern in variants:
                    reps = (1, 3) if mode == "eager" else (2, 5)
                    c = dict(base, case=f"{model}-b{batch}-{mode}-{kern}", mode=mode,
                             kernels=kern, kv_dtype="bf16", impl="zoo")
                    add(c, lambda m=mode, k=kern, b=batch, r=reps: zoo_case(
                        model, b, 512, 128, m, k, "bf16", bw, *r))
                    if "peer_decode_tok_s" in peer and "decode_tok_s" in c:
                        c["peer_decode_tok_s"] = peer["peer_decode_tok_s"]
                        c["zoo_over_peer"] = c["decode_tok_s"] / peer["peer_decode_tok_s"]
                        save()
        elif grp == "kv":
            base = {"model": "llama3_2_1b", "batch": 64, "prompt_len": 8192, "new_tokens": 32,
                    "context_len": 8224, "peer_decode_tok_s": None,
                    "peer_note": "transformers not run at batch 64 x 8k (not part of the target)"}
            for mode, kern, kvd in [("cudagraph", "torch", "bf16"), ("cudagraph", "triton", "bf16"),
                                    ("cudagraph", "triton", "int8"),
                                    ("cudagraph", "triton", "fp8_e4m3")]:
                add(dict(base, case=f"kv_dominated-{mode}-{kern}-{kvd}", mode=mode, kernels=kern,
                         kv_dtype=kvd, impl="zoo"),
                    lambda m=mode, k=kern, q=kvd: zoo_case("llama3_2_1b", 64, 8192, 32, m, k, q,
                                                           bw, 1, 2))
            by = {c["case"]: c for c in rec["cases"]}
            ref = by.get("kv_dominated-cudagraph-triton-bf16", {}).get("decode_tok_s")
            for kvd in ("int8", "fp8_e4m3"):
                c = by.get(f"kv_dominated-cudagraph-triton-{kvd}", {})
                if ref and "decode_tok_s" in c:
                    c["speedup_vs_bf16_kv"] = c["decode_tok_s"] / ref
            save()
        elif grp == "kv_error":  # its own process: two 8k x 64 prefills side by side do not fit
            try:
                rec["kv_error"] = kv_error(64, 8192, 64, ["int8", "fp8_e4m3"])
            except Exception as e:  # noqa: BLE001
                rec["kv_error"] = {"error": f"{type(e).__name__}: {e}"[:500]}
            save()
            print("kv_error", rec["kv_error"], flush=True)
        elif grp == "prefill":
            gemm = ceil["gemm_flops_bf16"]
            for model in ("llama3_2_1b", "llama3_1_8b"):
                for prompt in (512, 2048):
                    for kern in ("triton", "torch"):
                        add({"case": f"{model}-prefill{prompt}-cudagraph-{kern}", "model": model,
                             "batch": 1, "prompt_len": prompt, "mode": "cudagraph",
                             "kernels": kern, "kv_dtype": "bf16", "impl": "zoo"},
                            lambda m=model, p=prompt, k=kern: prefill_case(m, p, k, gemm))
        elif grp == "gemv":
            try:
                rec["gemv"] = gemv_rows(bw)
            except Exception as e:  # noqa: BLE001
                rec["gemv"] = [{"error": f"{type(e).__name__}: {e}"[:500],
                                "traceback": traceback.format_exc()[-1500:]}]
            save()
            for r in rec["gemv"]:
                print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()
                       if k not in ("traceback", "weight_bytes")}, flush=True)
        elif grp == "nvtx":
            try:
                rec["nvtx"] = nvtx_overhead()
            except Exception as e:  # noqa: BLE001
                rec["nvtx"] = [{"error": f"{type(e).__name__}: {e}"[:500]}]
            save()
            print("nvtx", rec["nvtx"], flush=True)
        elif grp == "kernels":
            try:
                rec["kernels"] = kernel_rows(bw)
            except Exception as e:  # noqa: BLE001
                rec["kernels"] = [{"error": f"{type(e).__name__}: {e}"[:500],
                                   "traceback": traceback.format_exc()[-1500:]}]
            save()
            for r in rec["kernels"]:
                print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()
                       if k != "traceback"}, flush=True)
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
