"""Latent attention's decode micro-benchmark (``decode_attn`` entries of ``impl`` ``mla``):
``kernels.mla_decode`` in the absorbed form, launched as ``zoo.mla_attention.MLAttention.decode``
launches it (the model's dtype out), over cached latents and RoPE keys read from DRAM.

A shape is ``B`` sequences, ``G`` query heads sharing the one latent "KV head" (``Hkv`` 1), ``S``
positions attended, ``D`` the latent's width (``kv_lora_rank``) and ``R`` the RoPE key's
(``qk_rope_head_dim``), ``kv_dtype`` the cache's (16-bit: the kernel reads no quantized cache).
Times in s; ``bytes``: the cache read (``B S (D + R)`` elements), the kernel's minimum DRAM
traffic; ``scores``: ``B G S``.
"""

from __future__ import annotations

from .microbench import KV_BYTES, cold_copies, entry


def mla_grid(quick: bool) -> list[dict]:
    """Shapes for the fit of ``(mla, bf16)`` (a study's own shapes correct it): batch 1 and 8,
    16 and 128 heads (DeepSeek-V2-Lite's and V3's), 512 and 4096 positions, DeepSeek's latent
    of 512 and RoPE key of 64; ``quick``: four small ones."""
    if quick:
        grid = [(1, 4, 128, 64, 16), (2, 4, 256, 64, 16), (1, 8, 128, 32, 16),
                (2, 8, 512, 64, 16)]
    else:
        grid = [(b, g, s, 512, 64) for b in (1, 8) for g in (16, 128) for s in (512, 4096)]
    return [dict(impl="mla", kv_dtype="bf16", B=B, Hkv=1, G=G, S=S, D=D, ring=0, R=R)
            for B, G, S, D, R in grid]


def mla_decode(device, tm, rnd, shapes, progress=None) -> list[dict]:
    """``decode_attn`` rows of ``impl`` ``mla`` for ``shapes`` (dicts of ``kv_dtype``, ``B``,
    ``G``, ``S``, ``D``, ``R``; optionally ``cap``, the cache's capacity, default ``S + 64``):
    one call per timing, the caches rotated through copies (``cold_copies``).

    ``tm``, ``rnd``: ``sweep.measure.calibration_run``'s timer and random tensors.

    Raises:
        ValueError: a quantized ``kv_dtype`` (the kernel reads a 16-bit cache only).
    """
    import torch

    from kernels.mla_decode import mla_decode as kernel

    cuda = device == "cuda"
    rows = []
    for i, sh in enumerate(shapes):
        kvd = sh["kv_dtype"]
        if KV_BYTES[kvd] < 2:
            raise ValueError(f"mla decode attention reads a 16-bit cache, not kv_dtype={kvd}")
        B, G, S, D, R = (int(sh[k]) for k in ("B", "G", "S", "D", "R"))
        cap = sh.get("cap")
        cache = int(cap) if cap is not None and cap == cap and int(cap) >= S else S + 64
        q_lat, q_pe = rnd(B, G, D), rnd(B, G, R)
        pos = torch.tensor([S - 1], device=device)
        scale = (D // 4 + R) ** -0.5  # any scale: the time does not depend on it
        nbytes = float(B * S * (D + R) * KV_BYTES[kvd])
        fns = []
        for _ in range(cold_copies(nbytes, cuda, cap=32)):
            lat, kpe = rnd(B, 1, cache, D), rnd(B, 1, cache, R)
            fns.append(lambda lat=lat, kpe=kpe, q=(q_lat, q_pe), p=pos, sc=scale: kernel(
                *q, lat, kpe, p, sc, out_dtype=q[0].dtype))
        sp = tm(fns)
        rows.append(entry("decode_attn", sp, impl="mla", kv_dtype=kvd, B=B, Hkv=1, G=G, S=S, D=D,
                          ring=0, R=R, bytes=nbytes, scores=float(B * G * S)))
        del fns
        if progress:
            progress(i + 1, len(shapes))
    return rows
