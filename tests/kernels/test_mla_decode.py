"""MLA's absorbed-form decode kernel (``kernels.mla_decode``) against its PyTorch reference: the
scores of the absorbed queries against the cached latents and rotated keys, the latents summed;
several splits merged, heads and ranks that are no power of two, a position inside the cache."""

import pytest
import torch

from kernels.mla_decode import mla_decode
from tests.kernels.conftest import DEVICE, DTYPES, close


def reference(q_lat, q_pe, lat, kpe, n, scale):
    """``softmax((q_lat c^T + q_pe k_pe^T) scale) c`` over the first ``n`` positions, float32."""
    c, k = lat[:, :n].float(), kpe[:, :n].float()
    s = (q_lat.float() @ c.transpose(1, 2) + q_pe.float() @ k.transpose(1, 2)) * scale
    return s.softmax(-1) @ c


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,H,r,R,S,P", [(2, 3, 24, 8, 50, 37), (1, 16, 64, 16, 40, 39),
                                         (3, 20, 32, 8, 70, 0)])
@pytest.mark.parametrize("swap", [False, True])
def test_matches_the_reference(B, H, r, R, S, P, dtype, swap, device):
    g = torch.Generator(device).manual_seed(S + P)
    q_lat = torch.randn(B, H, r, device=device, dtype=dtype, generator=g)
    q_pe = torch.randn(B, H, R, device=device, dtype=dtype, generator=g)
    lat = torch.randn(B, 1, S, r, device=device, dtype=dtype, generator=g)
    kpe = torch.randn(B, 1, S, R, device=device, dtype=dtype, generator=g)
    pos = torch.tensor([P], device=device)
    scale = (r + R) ** -0.5
    tile = (16, 16, 4, 1) if DEVICE == "cpu" else None  # on the GPU: the shipped choice
    if swap:  # the products transposed (on the GPU at a tile of 64 positions, its wgmma's M)
        tile = (*(tile or (16, 64, 4, 2)), True)
    got = mla_decode(q_lat, q_pe, lat, kpe, pos, scale, tile=tile)
    want = reference(q_lat, q_pe, lat[:, 0], kpe[:, 0], P + 1, scale)
    assert got.dtype == torch.float32 and got.shape == (B, H, r)
    close(got, want, dtype)


def test_the_models_absorbed_form_is_the_kernels():
    """``zoo.mla_attention.MLAttention.absorbed`` (W_UK folded into the query, W_UV after) gives
    what the kernel gives on the same cache (float32)."""
    from zoo import ModelConfig
    from zoo.mla_attention import MLAttention

    cfg = ModelConfig.from_name("tiny", kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
                                v_head_dim=16, q_lora_rank=0, dtype="fp32", kernels="torch")
    att = MLAttention(cfg, 0).to(DEVICE)
    torch.nn.init.normal_(att.wkv_b.weight, std=0.2)
    B, H, S, n = 2, cfg.n_heads, 24, 19
    g = torch.Generator().manual_seed(0)
    q_nope = torch.randn(B, H, 1, 16, generator=g).to(DEVICE)
    q_pe = torch.randn(B, H, 1, 8, generator=g).to(DEVICE)
    lat = torch.randn(B, 1, S, 32, generator=g).to(DEVICE)
    kpe = torch.randn(B, 1, S, 8, generator=g).to(DEVICE)
    scale = 24 ** -0.5
    with torch.no_grad():
        want = att.absorbed(q_nope, q_pe, lat[:, :, :n], kpe[:, :, :n], None, scale)
    w = att.wkv_b.weight.view(H, 32, 32)
    w_uk, w_uv = w[:, :16], w[:, 16:]
    q_lat = torch.einsum("bhn,hnr->bhr", q_nope[:, :, 0], w_uk).contiguous()
    o = mla_decode(q_lat, q_pe[:, :, 0].contiguous(), lat, kpe,
                   torch.tensor([n - 1], device=DEVICE), scale, tile=(16, 16, 4, 1))
    got = torch.einsum("bhr,hvr->bhv", o, w_uv)[:, :, None]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_many_splits_merge_in_chunks_and_blocks(monkeypatch):
    """Splits more than the merge takes per step and a rank not a multiple of its chunk: the
    merge's loop over blocks of splits and its masked channels give the reference (float32)."""
    import kernels.mla_decode as M

    monkeypatch.setattr(M, "MERGE_SPLITS", 2)
    monkeypatch.setattr(M, "MERGE_CHUNK", 16)
    monkeypatch.setattr(M, "_n_sm", lambda device: 64)
    B, H, r, R, S, P = 1, 5, 40, 8, 300, 290
    g = torch.Generator().manual_seed(3)
    q_lat, q_pe = torch.randn(B, H, r, generator=g), torch.randn(B, H, R, generator=g)
    lat, kpe = torch.randn(B, S, r, generator=g), torch.randn(B, S, R, generator=g)
    dev = [t.to(DEVICE) for t in (q_lat, q_pe, lat, kpe)]
    got = mla_decode(*dev, torch.tensor([P], device=DEVICE), 0.1, tile=(16, 16, 4, 1))
    n_splits, _ = M.plan_splits(B, 1, S, 16 * M.MIN_TILES, 64)
    assert n_splits >= 4  # the merge loops over at least two blocks of two splits
    close(got, reference(q_lat, q_pe, lat, kpe, P + 1, 0.1).to(DEVICE), torch.float32)


def test_the_kernel_list_counts_the_kernels_launches():
    """``zoo.attn.MLA_DECODE_LAUNCHES`` (the torch-free kernel list's count) is the kernel's."""
    from kernels.mla_decode import launches
    from zoo.attn import MLA_DECODE_LAUNCHES

    assert MLA_DECODE_LAUNCHES == launches()


def test_the_merge_in_two_passes_matches_the_reference(monkeypatch):
    """More splits than the merge loads at once (``MERGE_ONE_PASS`` lowered to 2): the
    two-pass merge, ``MERGE_SPLITS`` at a time, gives the reference too."""
    import kernels.mla_decode as K_

    monkeypatch.setattr(K_, "MERGE_ONE_PASS", 2)
    monkeypatch.setattr(K_, "MERGE_SPLITS", 2)
    g = torch.Generator(DEVICE).manual_seed(5)
    B, H, r, R, S = 1, 4, 32, 8, 200
    q_lat = torch.randn(B, H, r, device=DEVICE, generator=g)
    q_pe = torch.randn(B, H, R, device=DEVICE, generator=g)
    lat = torch.randn(B, S, r, device=DEVICE, generator=g)
    kpe = torch.randn(B, S, R, device=DEVICE, generator=g)
    got = mla_decode(q_lat, q_pe, lat, kpe, torch.tensor([S - 1], device=DEVICE), 0.1,
                     tile=(16, 16, 4, 1), min_tiles=1)
    close(got, reference(q_lat, q_pe, lat, kpe, S, 0.1), torch.float32)
