"""The seam a new architecture family goes through: a component registered in one module is
counted, priced, run and reported by the rest of the project with no edit elsewhere."""

import math
from pathlib import Path

import pytest
import torch

from tests.helpers import run_tiny

REPO = Path(__file__).resolve().parent.parent
# what adding the toy FFN kind took: its module (with its registration) and this test
FILES = ("tests/relu2_ffn.py", "tests/test_components.py")


def test_the_toy_component_takes_at_most_three_files():
    assert len(FILES) <= 3 and all((REPO / f).exists() for f in FILES)


def test_the_stage_knows_the_gemv_paths_rows():
    """``zoo.launches`` (torch-free) holds the decode GEMV path's row limit as its own constant:
    it must be ``kernels.gemv.MAX_M``."""
    from kernels.gemv import MAX_M
    from zoo.launches import GEMV_MAX_M

    assert GEMV_MAX_M == MAX_M


def test_a_registered_ffn_kind_is_counted_priced_and_run_on_the_cpu():
    """ReLU^2 (``tests/relu2_ffn.py``): its design validates, ``zoo.counts`` counts
    its parameters as the built model holds them and its FLOPs as one projection in and one
    out, the predictor lists and prices its kernels (its activation a kernel of its own on the
    decode GEMV path, unlike SwiGLU's), and the model generates on the CPU through its
    activation."""
    from sweep.analysis import calibration_store as store
    from sweep.analysis.hardware import load_spec
    from sweep.analysis.predict import kernel_list, predict
    from sweep.analysis.pricing import Calibrated
    from tests.relu2_ffn import KIND  # registers relu2
    from zoo import TINY, Transformer, counts, generate
    from zoo.ffn import kind

    cfg = TINY.replace(ffn_type="relu2").validate()
    assert kind(cfg) is KIND
    model = Transformer.build(cfg, "cpu", seed=0)
    assert type(model.layers[0].feed_forward).__name__ == "ReluSquaredFFN"
    assert counts.params(cfg).total == sum(p.numel() for p in model.parameters())
    st = counts.stage(cfg, 2, 1, 8)
    assert st.flops["ffn"] == cfg.n_layers * 2 * 2 * cfg.d_model * cfg.ffn_dim * 2
    swiglu = counts.stage(TINY, 2, 1, 8)
    assert st.flops["ffn"] * 3 == swiglu.flops["ffn"] * 2

    h = torch.randn(3, cfg.ffn_dim)
    assert torch.equal(model.layers[0].feed_forward.act(h), torch.relu(h) ** 2)
    prompt = torch.randint(0, cfg.vocab_size, (2, 8))
    out = generate(model, prompt, 4)
    assert out.shape == (2, 12) and torch.equal(out[:, :8], prompt)

    ops = [k.op for k in kernel_list(cfg, 4, 1, 64, "triton")]
    assert ops.count("w13") == ops.count("w2") == 1 and "swiglu" in ops  # its own activation
    assert "swiglu" not in [k.op for k in kernel_list(TINY, 4, 1, 64, "triton")]
    have = store.shipped("NVIDIA H100 80GB HBM3")
    big = cfg.replace(d_model=2048, n_heads=32, n_kv_heads=8, head_dim=64, ffn_dim=8192,
                      n_layers=16, vocab_size=128256, dtype="bf16", kv_dtype="bf16",
                      kernels="triton")
    p = predict(big, {"batch": 8, "prompt_len": 512, "new_tokens": 64}, load_spec("h100_sxm"),
                Calibrated(have))
    assert math.isfinite(p["decode_pred_ms_calibrated"]) and p["decode_pred_ms_ffn"] > 0


@pytest.mark.slow
def test_a_registered_ffn_kind_goes_through_a_study_and_its_report(tmp_path):
    """A predict-only study (one process) of the main job's designs with the toy kind: each row
    carries the kind; the constraint on non-embedding parameters reads the kind's count (one
    projection fewer than SwiGLU's: five of the six designs fall under 0.8e9 and are pruned,
    saying so); MHA is priced and the study writes its report."""
    import tests.relu2_ffn  # noqa: F401  registers relu2
    from zoo import ModelConfig, counts

    _, _, df = run_tiny(tmp_path, "+experiment=gqa_vs_mha", "study.predict=true",
                        "hardware=h100_sxm", "model.ffn_type=relu2")
    assert len(df) == 6 and df.ffn_type.eq("relu2").all()
    mqa = ModelConfig.from_name("llama3_2_1b", ffn_type="relu2", n_kv_heads=1)
    want = f"params_non_embedding = {counts.params(mqa).non_embedding:.4g}"
    assert want in df[df.n_kv_heads == 1].fail_reason.iloc[0]
    done = df[df.state == "COMPLETE"]
    assert list(done.n_kv_heads) == [32]
    assert done.decode_flops_ffn.gt(0).all() and done.decode_tok_s.gt(0).all()
    assert list(tmp_path.glob("**/report.html"))


def test_the_eager_greedy_step_is_the_logits_argmax():
    from zoo import TINY, Generator, Transformer

    model = Transformer.build(TINY, "cpu", seed=0)
    prompt = torch.randint(0, TINY.vocab_size, (2, 8), generator=torch.Generator().manual_seed(2))
    a, b = Generator(model, 2, 16), Generator(Transformer.build(TINY, "cpu", seed=0), 2, 16)
    tok = a.prefill(prompt).argmax(-1, keepdim=True)
    b.prefill(prompt)
    for _ in range(4):
        logits = b.decode(tok)
        nxt = a.decode_greedy(tok)
        assert torch.equal(a.last_logits, logits)
        assert torch.equal(nxt, logits.argmax(-1, keepdim=True)) and a.pos == b.pos
        tok = nxt
    a.pos = a.max_seq_len  # a full cache is refused by either step, before any work
    for step in (a.decode, a.decode_greedy):
        with pytest.raises(ValueError, match="cache full: position 16 of max_seq_len 16"):
            step(tok)
