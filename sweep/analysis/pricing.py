"""Pricing a kernel from a device's calibration table (``sweep.caches.calibration``).

``Calibrated`` turns one kernel of ``sweep.analysis.predict.kernel_list`` (its ``kind`` and
``shape``) into seconds: GEMMs interpolated in log M between the calibrated M of the same
``(N, K)`` (or scaled from the nearest calibrated ``(N, K)`` by its achieved FLOP/s); decode
attention from a fit on KV bytes and scores corrected by the calibrated shapes near it; the
elementwise kernels interpolated by bytes in log-log; prefill attention from the achieved FLOP/s
at the nearest sequence length and head_dim; launch costs as measured. A term outside the
calibrated range goes to ``notes``. A transfer to another device (``predict.transfer``) scales the
compute- and memory-bound parts (``scale``) and leaves the fixed ones.
"""

from __future__ import annotations

import math

import numpy as np

from zoo.formats import DTYPE_BYTES

from .calibration_store import Calibration
from .interp import interp_log
from .price_attention import decode_attn_price, prefill_attn_price
from .price_moe import moe_gemm_price
from .proxies import half_twin, proxy_price


def _covers(rows, m: float) -> bool:
    """Whether calibrated GEMM ``rows`` (one ``(N, K)``) hold an M at or around ``m``."""
    return len(rows) > 0 and rows.M.min() <= m <= rows.M.max()


def stand_in(basis: str) -> bool:
    """Whether a kernel's price basis (``Calibrated.price``'s second value) is another kernel's
    entry standing in for it (``sweep.analysis.proxies``: its basis says ``(as ...)``, or a
    grouped GEMM's ``rows stacked``)."""
    return "(as " in basis or "rows stacked" in basis


class Calibrated:
    """Prices kernels from a calibration table (``sweep.caches.calibration``).

    Args:
        cal: the device's ``Calibration`` (``sweep.analysis.calibration_store``: its table of
            entries and its meta: device, date, ceilings).
        scale: ``{"compute": f, "memory": g}`` time factors when transferred from another device
            (``transfer``); 1 on the device it was measured on.
    """

    def __init__(self, cal: Calibration, scale: dict | None = None):
        self.calibration = cal
        self.t, self.meta = cal.entries(), cal.meta
        self.scale = scale or {"compute": 1.0, "memory": 1.0}
        self.notes: list[str] = []
        self._fits: dict = {}

    def _note(self, text):
        if text not in self.notes:
            self.notes.append(text)

    def rows(self, kind: str, **equal):
        """The table's entries of ``kind`` whose columns ``equal`` hold the given values (in the
        table's order), selected once per key: a design prices hundreds of kernels from a few
        thousand entries. Kept with the calibration (``Calibration.selections``) while ``t`` is
        its table, shared by every design priced from it; else in ``_fits`` (cleared where the
        table changes)."""
        cache = self._selections()
        key = ("rows", kind, tuple(sorted(equal.items())))
        if key not in cache:
            if "by_kind" not in cache:
                cache["by_kind"] = dict(tuple(self.t.groupby("kind", sort=False)))
            sel = cache["by_kind"].get(kind, self.t.iloc[:0])
            for k, v in equal.items():
                sel = sel[sel[k] == v]
            cache[key] = sel
        return cache[key]

    def _selections(self) -> dict:
        """Where ``rows`` and the medians over the table's rows are kept (see ``rows``)."""
        cal = self.calibration
        return cal.selections if self.t is cal.table else self._fits

    def _median_by(self, rows, by: str, key: tuple):
        """``rows.groupby(by).time_s.median()`` (a Series indexed by ``by``, ascending), kept
        under ``key`` with ``rows``' selection."""
        cache = self._selections()
        if ("median", by, key) not in cache:
            cache[("median", by, key)] = rows.groupby(by).time_s.median()
        return cache[("median", by, key)]

    def gemm(self, s: dict) -> tuple[float, str]:
        """``(time s, basis)`` of one ``[M, K] x [K, N]`` GEMM (``s``: ``M``, ``N``, ``K``,
        ``dtype``): the calibrated entries of this ``(N, K)`` interpolated in log M; where they
        do not reach this M, the nearest ``(N, K)`` calibrated around it, its achieved FLOP/s on
        this GEMM's FLOPs (noted); a shape measured at one M only is scaled by M. A transfer
        scales a compute-bound GEMM by the compute ratio, a memory-bound one's non-fixed part by
        the memory ratio.

        Raises:
            KeyError: no GEMM of this dtype in the calibration.
        """
        g = self.rows("gemm", dtype=s["dtype"])
        if g.empty:
            raise KeyError(f"no {s['dtype']} GEMM in the calibration")
        same = g[(g.N == s["N"]) & (g.K == s["K"])]
        basis = f"gemm N={s['N']} K={s['K']}"
        if not _covers(same, s["M"]):  # the nearest (N, K) calibrated around this M, scaled
            cover = g.groupby(["N", "K"]).M.agg(["min", "max"])
            cover = cover[(cover["min"] <= s["M"]) & (cover["max"] >= s["M"])]
            pool = cover.reset_index() if len(cover) else g[["N", "K"]].drop_duplicates()
            if not same.empty and not len(cover):
                pool = same[["N", "K"]].drop_duplicates()  # its own shape, at another M
            dist = ((np.log(pool.N) - math.log(s["N"])) ** 2
                    + (np.log(pool.K) - math.log(s["K"])) ** 2)
            nn = pool.loc[dist.idxmin()]
            if (nn.N, nn.K) != (s["N"], s["K"]):
                same = g[(g.N == nn.N) & (g.K == nn.K)]
                basis = f"gemm N={int(nn.N)} K={int(nn.K)} (nearest; scaled by FLOPs)"
                self._note(f"GEMM N={s['N']} K={s['K']} not calibrated: scaled from "
                           f"N={int(nn.N)} K={int(nn.K)} (calibrated around M={s['M']})")
        nk = float(same.N.iloc[0] * same.K.iloc[0])
        med = self._median_by(same, "M", ("gemm", s["dtype"], float(same.N.iloc[0]),
                                          float(same.K.iloc[0])))
        ms = med.index.to_numpy(float)
        t, inside = interp_log(s["M"], ms, med.to_numpy(float))
        if not inside and len(med) == 1:  # one M measured: its achieved FLOP/s at this M
            t = max(t * s["M"] / float(ms[0]), self._gemm_fixed(s["dtype"]))
        if "nearest" in basis:  # the same achieved FLOP/s on this GEMM's FLOPs
            t *= s["N"] * s["K"] / nk
        if not inside:
            self._note(f"GEMM M={s['M']} outside the calibrated M range "
                       f"[{int(ms.min())}, {int(ms.max())}] for N={s['N']} K={s['K']}")
        wb = DTYPE_BYTES[s["dtype"]]
        ai = 2 * s["M"] * s["N"] * s["K"] / ((s["N"] * s["K"] + s["M"] * (s["N"] + s["K"])) * wb)
        if ai >= self.scale.get("ridge", 0.0):
            return t * self.scale["compute"], basis
        fixed = min(self._gemm_fixed(s["dtype"]), t)  # latency a faster memory does not shorten
        return fixed + (t - fixed) * self.scale["memory"], basis

    def gemv(self, s: dict) -> tuple[float, str]:
        """A decode step's linear layer on the Triton path (``kernels.decode_linear``: the GEMV
        with its prologue, or cuBLAS after it): the calibrated ``gemv`` entries of the same
        ``(N, K, prologue)`` interpolated in log M, or scaled by weight bytes from the nearest
        calibrated ``(N, K)`` of the prologue (noted). A calibration without GEMV entries prices
        it as the cuBLAS GEMM, noted. Memory-bound: a transfer scales all but the fixed part.
        Returns ``(time s, basis)``.

        Raises:
            KeyError: no GEMV nor GEMM of this dtype in the calibration.
        """
        g = self.rows("gemv", dtype=s["dtype"]) if "prologue" in self.t else self.t.iloc[:0]
        if g.empty:
            self._note("decode GEMV not calibrated: priced as the cuBLAS GEMM")
            sec, basis = self.gemm(s)
            return sec, basis + " (for the decode GEMV)"
        pro = s.get("prologue", "none")
        cand = g[g.prologue == pro]
        if cand.empty:
            cand = g
        same = cand[(cand.N == s["N"]) & (cand.K == s["K"])]
        basis = f"gemv N={s['N']} K={s['K']} {pro}"
        if same.empty:
            dist = (np.log(cand.N) - math.log(s["N"])) ** 2 + (np.log(cand.K) -
                                                              math.log(s["K"])) ** 2
            nn = cand.loc[dist.idxmin()]
            same = cand[(cand.N == nn.N) & (cand.K == nn.K)]
            basis = f"gemv N={int(nn.N)} K={int(nn.K)} {nn.prologue} (nearest; scaled by bytes)"
            self._note(f"decode GEMV N={s['N']} K={s['K']} {pro} not calibrated: scaled from "
                       f"N={int(nn.N)} K={int(nn.K)}")
        med = self._median_by(same, "M", ("gemv", s["dtype"], pro, float(same.N.iloc[0]),
                                          float(same.K.iloc[0])))
        sec, inside = interp_log(s["M"], med.index.to_numpy(float), med.to_numpy(float))
        fixed = min(self._fixed("gemv", s["dtype"]), sec)
        if "nearest" in basis:  # the bytes part scales with the weights, the latency does not
            sec = fixed + (sec - fixed) * s["N"] * s["K"] / float(nn.N * nn.K)
            fixed = min(fixed, sec)
        if not inside:
            self._note(f"decode GEMV M={s['M']} outside the calibrated M range for "
                       f"N={s['N']} K={s['K']}")
        return fixed + (sec - fixed) * self.scale["memory"], basis

    def _gemm_fixed(self, dtype: str) -> float:
        return self._fixed("gemm", dtype)

    def _fixed(self, kind: str, dtype: str) -> float:
        """The fixed part (s) of a memory-bound GEMM (or decode GEMV): intercept of ``time =
        fixed + bytes / bandwidth`` fitted (relative weights) over this dtype's calibrated
        entries of ``kind`` with M <= 16."""
        if (f"{kind}_fixed", dtype) not in self._fits:
            g = self.rows(kind, dtype=dtype)
            g = g[g.M <= 16]
            fixed = 0.0
            if len(g) >= 2:
                wb = DTYPE_BYTES[dtype]
                x = ((g.N * g.K + g.M * (g.N + g.K)) * wb).to_numpy(float)
                y = g.time_s.to_numpy(float)
                _, fixed = np.polyfit(x, y, 1, w=1 / y)
            self._fits[(f"{kind}_fixed", dtype)] = max(float(fixed), 0.0)
        return self._fits[(f"{kind}_fixed", dtype)]

    def _linear(self, kind: str, key: dict) -> tuple[float, float, float, float]:
        """``(fixed s, s/byte, min bytes, max bytes)`` of a least-squares fit of time on bytes."""
        sel = self.rows(kind, **key)
        if len(sel) < 2:
            raise KeyError(f"no {kind} {'/'.join(map(str, key.values()))} in the calibration")
        fk = (kind, tuple(sorted(key.items())))
        if fk not in self._fits:
            x, y = sel.bytes.to_numpy(float), sel.time_s.to_numpy(float)
            slope, fixed = np.polyfit(x, y, 1, w=1 / y)  # relative error weighted
            self._fits[fk] = (max(fixed, float(y.min()) * 0.5), max(slope, 0.0), x.min(), x.max())
        return self._fits[fk]

    def linear(self, kind: str, key: dict, nbytes: float) -> tuple[float, str]:
        """Time of a bandwidth kernel moving ``nbytes``: interpolated in log-log between the
        calibrated sizes (median over shapes of equal bytes); outside them the linear fit
        ``fixed + bytes / bandwidth``, noted. A transfer scales the per-byte part. ``nbytes`` in
        bytes; returns ``(time s, basis)``.

        Raises:
            KeyError: fewer than two calibrated entries of this kind and key.
        """
        fixed, per_byte, lo, hi = self._linear(kind, key)
        name = f"{kind} {'/'.join(str(v) for v in key.values())}"
        if not lo <= nbytes <= hi:
            self._note(f"{name} at {nbytes:.3g} bytes outside the calibrated "
                       f"[{lo:.3g}, {hi:.3g}]")
            return fixed + per_byte * nbytes * self.scale["memory"], f"{name} linear fit"
        med = self._median_by(self.rows(kind, **key), "bytes", (kind, tuple(sorted(key.items()))))
        t, _ = interp_log(nbytes, med.index.to_numpy(float), med.to_numpy(float))
        return fixed + (t - fixed) * self.scale["memory"], f"{name} interpolated by bytes"

    def decode_attn(self, s: dict, nbytes: float) -> tuple[float, str]:
        """One decode-attention call of ``nbytes`` KV bytes: ``(time s, basis)``
        (``sweep.analysis.price_attention.decode_attn_price``).

        Raises:
            KeyError: fewer than three calibrated entries of this implementation and KV dtype.
        """
        return decode_attn_price(self, s, nbytes)

    def prefill_attn(self, s: dict, flops: float) -> tuple[float, str]:
        """Causal prefill attention of ``flops``: ``sweep.analysis.price_attention``."""
        return prefill_attn_price(self, s, flops)

    # a kernel's relative uncertainty by what its price rests on (``uncertainty``); tuned on the
    # development set (conf/validation/development.yaml). ``stand_in``: a kernel priced by another
    # kernel's entry (``sweep.analysis.proxies``): the MoE grouped GEMMs as a GEMM over the
    # experts' rows stacked read 44-50% fast at prefill and 5-10% at decode on the H100's
    # moe_vs_dense study, and E64 k8's decode 30% fast against its own entries on the H200;
    # router_route as its two launches 20-35% slow (results/reference/moe_h100.md)
    UNCERTAINTY = {"base": 0.03, "nearest": 0.12, "extended": 0.10, "uncorrected_fit": 0.10,
                   "outside": 0.10, "transferred": 0.05, "stand_in": 0.30}

    def uncertainty(self, basis: str, noted: bool = False) -> float:
        """The relative uncertainty of a kernel priced from ``basis`` (``price``'s second
        value): the micro-benchmarks' own run-to-run spread, more where the entry is another
        shape's (scaled from the nearest), a fit extended or uncorrected by nearby shapes,
        outside the calibrated range (``noted``), transferred from another device, or priced
        by a stand-in (``stand_in``)."""
        u = self.UNCERTAINTY
        x = u["base"]
        if stand_in(basis):
            x += u["stand_in"]
        if "nearest" in basis or "as GEMM" in basis or "for the decode GEMV" in basis:
            x += u["nearest"]
        if "linear fit" in basis:
            x += u["extended"]
        if "fit on KV bytes" in basis and "corrected" not in basis:
            x += u["uncorrected_fit"]
        if noted:
            x += u["outside"]
        if self.meta.get("transferred_to"):
            x += u["transferred"]
        return x

    def launch(self, what: str) -> float:
        """The measured cost (s) of the launch entry ``what`` (``kind == "launch"``, ``op``).

        Raises:
            KeyError: no such entry in the calibration.
        """
        row = self.rows("launch", op=what)
        if row.empty:
            raise KeyError(f"no launch cost '{what}' in the calibration")
        return float(row.time_s.iloc[0])

    def quantized(self, s: dict, t: float, basis: str) -> tuple[float, str]:
        """A GEMM of weights in another format (``weight_bits``; predicted only): ``t``, the
        16-bit kernel's time (s), its memory-bound part scaled by the bytes, noted. Returns
        ``(time s, basis)``."""
        bits = s.get("weight_bits")
        wb = DTYPE_BYTES[s["dtype"]]
        if not bits or bits == 8 * wb:
            return t, basis
        full = s["N"] * s["K"] * wb + s["M"] * (s["N"] + s["K"]) * wb
        ai = 2 * s["M"] * s["N"] * s["K"] / full
        if ai >= self.scale.get("ridge", 100.0):  # compute-bound: the same FLOPs
            return t, basis + f" ({bits:g}-bit weights: compute-bound, unchanged)"
        q = s["N"] * s["K"] * bits / 8 + s["M"] * (s["N"] + s["K"]) * wb
        self._note(f"{bits:g}-bit weights priced from the {8 * wb}-bit kernel's time scaled by "
                   "their bytes (predicted only)")
        return t * q / full, basis + f" (scaled to {bits:g}-bit weights)"

    def price(self, k) -> tuple[float, str]:
        """Calibrated time of one launch of ``k`` (a ``predict.Kernel``; s) and the entry it came
        from."""
        if (twin := half_twin(self, k)) is not None:  # fp16 on a calibration of bf16 entries
            t, basis = self.price(twin)
            return t, basis + " (as bf16)"
        if k.kind == "gemm" and k.shape.get("experts"):  # a grouped GEMM over touched experts
            return moe_gemm_price(self, k)
        if k.kind == "gemm":
            return self.quantized(k.shape, *self.gemm(k.shape))
        if k.kind == "gemv":
            return self.quantized(k.shape, *self.gemv(k.shape))
        if k.kind == "decode_attn":
            return self.decode_attn(k.shape, k.bytes)
        if k.kind == "prefill_attn":
            return self.prefill_attn(k.shape, k.flops)
        op = k.shape["op"]
        try:
            return self.linear("elementwise", {"op": op, "impl": k.shape["impl"]}, k.bytes)
        except KeyError:
            pass
        try:
            return proxy_price(self, k)  # an op with no entry of its own yet, or KeyError
        except KeyError:
            if op not in ("sample", "argmax"):
                raise
        # an older calibration: the sampling's launches as tiny kernels, as it priced them
        self._note("logits sampling not calibrated: priced as tiny kernels")
        return k.launches * self.launch("graph_kernel"), "launch graph_kernel (sampling)"
