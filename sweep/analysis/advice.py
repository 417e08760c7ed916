"""The design advisor: where a design loses efficiency on a hardware spec, and the nearest
alternative designs the performance model predicts faster.

Rules (Anthony et al., "The Case for Co-Designing Model Architectures with Hardware", ICPP 2024,
arXiv:2401.14489; NVIDIA "Matrix Multiplication Background" and "Optimizing Linear/Fully-Connected
Layers" user guides):

- **Tensor-core alignment**: every GEMM dimension (``d_model``, ``ffn_dim`` where a layer is
  dense, a mixture of experts' ``expert_ffn_dim``, the attention widths
  ``n_heads * head_dim`` and ``n_kv_heads * head_dim``, ``vocab_size``) a multiple of 64 for
  16-bit types (Anthony et al. sec. 4: multiples of 64 reach full tensor-core efficiency on A100/H100;
  below 8 elements, i.e. 16 bytes, rows lose the vectorized load path altogether).
- **Tile quantization**: a GEMM's ``N`` (and ``M``) not a multiple of the 128-wide tile leaves the
  last tile partly empty: efficiency ``N / (ceil(N / 128) * 128)``.
- **Wave quantization**: ``tiles = ceil(M / 128) * ceil(N / 128)`` thread blocks (times the experts
  of a grouped GEMM, one launch over all of them, ``M`` each one's rows) over ``sm_count``
  SMs run in ``ceil(tiles / sm_count)`` waves; efficiency ``tiles / (waves * sm_count)``.
- **head_dim** a multiple of 64 (64 / 128 / 256 are what FlashAttention-style kernels are tuned
  for; Anthony et al. sec. 5: head_dim 64 or 128, never e.g. 80).

``advise`` lists the findings and prices the nearest alternatives with ``predict.predict``: each
alternative within ``band`` of the design's non-embedding parameters and with the same KV bytes
per token (so its decode KV traffic and cache capacity are those of the design), its predicted
time per stage and gain ``1 - t_alt / t_design``; the first suggestion is the one with the largest
predicted gain in any stage (the stage it targets). The prices come from the calibration tables;
a GEMM shape the calibration lacks is priced from the nearest calibrated shape, which cannot see
that shape's alignment: ``missing_shapes`` names them, and on the calibration's own device
``sweep.cli.advise --bench`` measures them first (micro-benchmarks, as the calibration does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from zoo import counts
from zoo.config import DESIGN_FIELDS, DesignError, ModelConfig

from ..common.row import TIME
from .predict import STAND_INS, kernel_list, predict

ALIGN = 64  # elements: tensor-core alignment of 16-bit GEMM dimensions (Anthony et al. 2024)
TILE = 128  # a GEMM thread block's output tile edge (cuBLAS/CUTLASS Hopper bf16 kernels)
WAVE_WARN = 0.85  # wave efficiency below which a GEMM is listed


@dataclass
class AdviseConf:
    """Options of ``advise``.

    Attributes:
        band: the alternatives' non-embedding parameters within ``+-band`` of the design's.
        top: how many alternatives to keep, fastest predicted first.
        mode: the ``zoo.generate`` mode the prediction assumes.
    """

    band: float = 0.03
    top: int = 5
    mode: str = "cudagraph"

    def __post_init__(self):
        """Raises: ValueError: a band outside [0, 1) or ``top`` below 1 (the option named)."""
        if not 0 <= self.band < 1:
            raise ValueError(f"band={self.band}: the alternatives' parameter band is a fraction "
                             "in [0, 1) (0.03: +-3%)")
        if int(self.top) != self.top or self.top < 1:
            raise ValueError(f"top={self.top}: how many alternatives to keep, at least 1")


CORE = ("d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "ffn_dim", "vocab_size")


def design_of(cfg: ModelConfig) -> dict:
    """The design as the advice names it: the seven core fields, then every other design field
    (``zoo.config.DESIGN_FIELDS``: experts, attention kind, dtypes, ...) that differs from
    ``ModelConfig``'s default, so two designs that differ anywhere are named apart."""
    default = ModelConfig()
    out = {k: getattr(cfg, k) for k in CORE}
    out.update({k: getattr(cfg, k) for k in DESIGN_FIELDS
                if k not in out and getattr(cfg, k) != getattr(default, k)})
    return out


def _gemms(cfg: ModelConfig, batch: int, new: int, context: int, grouped: bool = True
           ) -> list[tuple[str, int, int, int, int]]:
    """``(op, M, N, K, groups)`` of the stage's GEMMs, once each: a grouped GEMM (the experts'
    ``moe_up``, ``moe_down``) runs ``groups`` experts of ``M`` rows each in one launch, any other
    one group; ``grouped=False`` leaves out the grouped ones (priced by their own ``moe_gemm``
    entries, not the ``gemm`` table)."""
    out = {}
    for k in kernel_list(cfg, batch, new, context, cfg.kernels):
        if k.kind == "gemm" and (grouped or "experts" not in k.shape):
            out[k.op] = (k.op, k.shape["M"], k.shape["N"], k.shape["K"],
                         k.shape.get("experts", 1))
    return list(out.values())


def findings(cfg: ModelConfig, workload: dict, sm_count: int) -> list[dict]:
    """Where ``cfg`` breaks the rules above, as ``{field, value, rule, detail}`` dicts (``field`` a
    design field or a stage's GEMM). ``sm_count``: the target's SMs (0: no wave check)."""
    out = []
    dense_ffn = not cfg.moe or cfg.first_k_dense > 0  # a layer runs the dense FFN's ffn_dim
    dims = (("d_model", cfg.d_model), *((("ffn_dim", cfg.ffn_dim),) if dense_ffn else ()),
            *((("expert_ffn_dim", cfg.expert_ffn_dim),) if cfg.moe else ()),
            ("vocab_size", cfg.vocab_size),
            ("n_heads*head_dim", cfg.q_dim), ("n_kv_heads*head_dim", cfg.kv_dim))
    for field, v in dims:
        if v % ALIGN:
            worst = v % 8 != 0
            out.append({"field": field, "value": v, "rule": f"not a multiple of {ALIGN}",
                        "detail": (f"{v} = {v // ALIGN} x {ALIGN} + {v % ALIGN}: the GEMMs over it "
                                   "leave tensor-core tiles partly empty"
                                   + ("; not even a multiple of 8 elements (16 bytes): no "
                                      "vectorized loads" if worst else ""))})
    if cfg.head_dim % ALIGN:
        out.append({"field": "head_dim", "value": cfg.head_dim, "rule": "not a multiple of 64",
                    "detail": "attention kernels are tuned for head_dim 64/128/256; the rest pad "
                              "to the next size"})
    B, T = workload["batch"], workload["prompt_len"]
    for op, M, N, _, groups in _gemms(cfg, B, T, T):
        tiles = groups * math.ceil(M / TILE) * math.ceil(N / TILE)
        tile_eff = N / (math.ceil(N / TILE) * TILE)
        if tile_eff < 0.97:
            out.append({"field": f"prefill GEMM {op}", "value": N, "rule": "tile quantization",
                        "detail": f"N={N}: the last of {math.ceil(N / TILE)} {TILE}-wide tiles is "
                                  f"{N % TILE}/{TILE} full (efficiency {tile_eff:.2f})"})
        if sm_count:
            waves = math.ceil(tiles / sm_count)
            eff = tiles / (waves * sm_count)
            if eff < WAVE_WARN:
                out.append({"field": f"prefill GEMM {op}", "value": tiles,
                            "rule": "wave quantization",
                            "detail": f"M={M} N={N}"
                                      + (f" x {groups} experts" if groups > 1 else "")
                                      + f": {tiles} tiles over {sm_count} SMs = {waves} "
                                      f"wave{'s' if waves > 1 else ''}, the last "
                                      f"{tiles - (waves - 1) * sm_count} tiles "
                                      f"(efficiency {eff:.2f})"})
    return out


def _round(v: int, m: int) -> set[int]:
    return {max(m, v // m * m), -(-v // m) * m}


def alternatives(cfg: ModelConfig, fields: set[str] | None = None) -> list[tuple[str, dict]]:
    """Nearby designs that mend an alignment of ``fields`` (the findings' design fields; None:
    every field): ``[(label, overrides)]``, unfiltered."""
    out = {}
    want = (lambda f: True) if fields is None else (lambda f: f in fields)

    def add(**kw):
        kw = {k: v for k, v in kw.items() if getattr(cfg, k) != v}
        if kw:
            out[", ".join(f"{k}={v}" for k, v in kw.items())] = kw

    for m in (64, 128, 256):
        for f in _round(cfg.ffn_dim, m) if want("ffn_dim") else ():
            add(ffn_dim=f)
        for f in _round(cfg.expert_ffn_dim, m) if want("expert_ffn_dim") and cfg.moe else ():
            add(expert_ffn_dim=f)
        for d in _round(cfg.d_model, m) if want("d_model") else ():
            add(d_model=d)
        for v in _round(cfg.vocab_size, m) if want("vocab_size") else ():
            if v >= cfg.vocab_size:  # a vocabulary only grows (padded ids are never produced)
                add(vocab_size=v)
    q, kv = cfg.q_dim, cfg.kv_dim
    if want("head_dim"):
        for hd in (64, 128, 256):  # same attention widths, aligned heads
            if q % hd == 0 and kv % hd == 0 and (q // hd) % (kv // hd) == 0:
                add(head_dim=hd, n_heads=q // hd, n_kv_heads=kv // hd)
    if want("n_heads*head_dim"):
        for dh in (-1, 1):  # an aligned head count, same KV heads
            n = cfg.n_heads + dh
            if n > 0 and n % cfg.n_kv_heads == 0 and (n * cfg.head_dim) % ALIGN == 0:
                add(n_heads=n)
    return list(out.items())


def advise(cfg: ModelConfig, workload: dict, spec, calibration, conf: AdviseConf | None = None
           ) -> dict:
    """Findings and the nearest faster alternatives of ``cfg`` on ``spec``.

    Args:
        cfg: the design; workload: ``batch``, ``prompt_len``, ``new_tokens``; spec: the target's
            ``HardwareSpec``; calibration: a ``Calibrated`` for the target (or None: the
            what-if's prices, ``targets.predict_on``: the spec's fit of public measurements, or
            the roofline x its stated efficiencies and launch cost; none sees alignment); conf:
            ``AdviseConf``.

    Returns:
        ``{"design", "findings", "predicted": {stage: ms}, "alternatives": [{label, overrides,
        params_non_embedding, params_change_pct, prefill_pred_ms, decode_pred_ms,
        prefill_gain_pct, decode_gain_pct, target_stage, gain_pct, stand_ins}] (``stand_ins``:
        its price or the design's rests on kernels priced by another's entry, ``prediction_basis``),
        "rejected": [{label,
        reason}], "missing_shapes", "basis"}``; times in ms, gains in % of the design's time.
    """
    conf = conf or AdviseConf()
    B, T, N = workload["batch"], workload["prompt_len"], workload["new_tokens"]

    bare = []  # without a calibration: the what-if's basis (fitted, or the roofline x stated)

    def price(c):  # ({stage: ms}, whether a kernel of it was priced by a stand-in)
        if calibration is None:  # as sweep.cli.whatif prices the target (targets.predict_on)
            from .targets import predict_on

            r = predict_on(c, workload, spec, None, mode=conf.mode)
            bare[:] = [r["prediction_basis"]]
            return ({st: r[TIME[st]] for st in ("prefill", "decode")}, False)
        r = predict(c, workload, spec, calibration, mode=conf.mode)
        return ({st: r[f"{st}_pred_ms_calibrated"] for st in ("prefill", "decode")},
                STAND_INS in r.get("prediction_basis", ""))

    base = counts.summary(cfg, B, T, N)
    why_not = ""
    try:
        t0, stood0 = price(cfg)
    except KeyError as e:  # a calibration without the design's kind of entry (its dtype, say)
        why_not = f" ({str(e).strip(chr(39))}: the calibration does not price this design)"
        calibration = None
        t0, stood0 = price(cfg)
    alts, rejected = [], []
    found = findings(cfg, workload, spec.sm_count)
    fields = {f["field"] for f in found if not f["field"].startswith("prefill GEMM")}
    for label, over in alternatives(cfg, fields):
        try:
            c = cfg.replace(**over).validate()
        except DesignError as e:
            rejected.append({"label": label, "reason": f"invalid: {e}"})
            continue
        s = counts.summary(c, B, T, N)
        dp = s["params_non_embedding"] / base["params_non_embedding"] - 1
        if abs(dp) > conf.band:
            rejected.append({"label": label, "reason": f"non-embedding params {dp:+.1%} outside "
                                                       f"+-{conf.band:.0%}"})
            continue
        if s["kv_bytes_per_token"] != base["kv_bytes_per_token"]:
            rejected.append({"label": label, "reason": "KV bytes/token differ"})
            continue
        t, stood = price(c)
        gain = {st: 100 * (1 - t[st] / t0[st]) for st in t}
        stage = max(gain, key=gain.get)
        alts.append({"label": label, "overrides": over,
                     "params_non_embedding": s["params_non_embedding"],
                     "params_change_pct": 100 * dp,
                     **{f"{st}_pred_ms": t[st] for st in t},
                     **{f"{st}_gain_pct": gain[st] for st in gain},
                     "target_stage": stage, "gain_pct": gain[stage],
                     # its price or the design's rests on stand-ins: the gain may be theirs
                     "stand_ins": stood or stood0})
    alts = sorted((a for a in alts if a["gain_pct"] > 0), key=lambda a: -a["gain_pct"])
    missing = []
    if calibration is not None:
        have = calibration.t[calibration.t.kind == "gemm"][["N", "K"]].drop_duplicates()
        have = set(map(tuple, have.to_numpy().astype(int).tolist()))
        for c in [cfg] + [cfg.replace(**a["overrides"]) for a in alts[:conf.top]]:
            for _, _, n, k, _ in _gemms(c, B, T, T, grouped=False):
                if (n, k) not in have and (n, k) not in missing:
                    missing.append((n, k))
    return {"design": design_of(cfg),
            "workload": {"batch": B, "prompt_len": T, "new_tokens": N},
            "target": spec.name, "findings": found,
            "predicted": {f"{st}_pred_ms": t0[st] for st in t0},
            "alternatives": alts[:conf.top], "rejected": rejected,
            "missing_shapes": missing,
            "basis": ("calibrated: " + str((calibration.meta or {}).get("device"))
                      + ("; the design's own price rests on stand-ins (kernels without "
                         "entries of their own priced by another's)" if stood0 else "")
                      if calibration is not None else
                      (bare[0] if bare else "roofline") + " (no alignment effects)" + why_not)}


def advise_study_row(meta: dict, row, cal_dir: Path | None = None) -> dict:
    """``advise`` for one completed trial ``row`` of a study (its ``study.json`` ``meta``: the
    workload, mode and hardware spec), priced from the study device's calibration cached in
    ``cal_dir``; a predict-only study's from the calibration file it was given
    (``calibration=FILE``, recorded in ``meta``) or else the shipped calibration of its spec's GPU,
    as its rows were (a measured study without a cached calibration: the shipped one too; else the
    what-if's prices, said in the result's ``basis``).

    Raises:
        KeyError, ValueError: the row or the meta lacks what the design needs.
    """
    from . import calibration_store as store
    from .hardware import HardwareSpec
    from .pricing import Calibrated
    from .targets import calibration_for, config_of

    spec = HardwareSpec(**meta["hardware_spec"])
    if meta.get("predict"):  # as its rows were priced: the file given, else its target's
        have = _given(meta.get("calibration")) or store.shipped_for(spec)
    else:
        have = (store.load(str(meta.get("env", {}).get("device", "")), cal_dir=cal_dir)
                or store.shipped_for(spec))
    wl = {k: int(meta["workload"][k]) for k in ("batch", "prompt_len", "new_tokens")}
    cfg, cal = config_of(row), Calibrated(have) if have else None
    if meta.get("predict"):  # as predict_on priced the rows: transferred to the target, or none
        cal = calibration_for(spec, cal, cfg.dtype)[0]
    return advise(cfg, wl, spec, cal, AdviseConf(mode=meta.get("mode") or "cudagraph"))


def _given(path: str | None):
    """The calibration file a predict-only study was given, or None (none given, or the file
    gone or unreadable since: the shipped one prices the advice then)."""
    from . import calibration_store as store

    if not path:
        return None
    try:
        return store.load_file(path)
    except (OSError, ValueError):
        return None
