"""Prefill and decode steps over a zoo ``Transformer`` with its static cache; greedy ``generate``.

Generation lives outside the model (gpt-fast ``generate.py``). ``Generator`` owns the position
counter and the decode ``mode``:

- ``eager``: every step launches its kernels from Python; attention reads exactly the filled prefix.
- ``cudagraph``: each decode step replays a captured CUDA graph. Shapes must be static, so the
  attended length is rounded up to a bucket of ``GRAPH_BUCKET`` positions (one graph per bucket,
  captured on first use, sharing one memory pool), and positions past the current one are masked.
  The prefill replays a graph too, one per prompt shape ``[B, T]`` (captured on its first call):
  a small model's eager prefill is bound by the host issuing its ops (Llama-3.2-1B shape, 512
  tokens: ~10 ms on the host for ~2 ms of GPU work on an H100), which says nothing of the design.
  Up to ``PREFILL_GRAPH_MAX_TOKENS`` prompt tokens (``batch * T``): a larger prefill is GPU-bound
  and its graph's private memory pool would hold every activation (batch 64 x 8192 tokens of the
  1B shape: tens of GB), so it runs eagerly.
- ``compile``: ``torch.compile(mode="reduce-overhead")`` of the same bucketed step (Inductor
  fuses elementwise work and records CUDA graphs itself); the prefill runs eagerly. The Triton
  kernels enter the traced step as custom ops (``kernels.ops``), so it launches what
  ``cudagraph`` does; each bucket's step runs eagerly once first, so tile choices and autotuning
  happen before Inductor records.

``Generator.prefill_mode`` says how the prefill ran (``cudagraph`` or ``eager``); rows record it.

``decode_greedy`` is a decode step with its greedy sample, as a trial and ``generate`` run it. In
``cudagraph`` mode the argmax (``kernels.argmax`` for a Triton design, ``torch.argmax`` for a
torch one) is captured in the step's graph, written into the graph's own token input, and the
graph advances its position on the device, so a step is one graph launch: no clone of the logits
and no copies of the token and position before it (as gpt-fast captures its sampling with the
step). Measured on the H100: ``results/reference/decode_levers_h100.md``.
"""

from __future__ import annotations

import torch

from kernels.argmax import argmax

from .model import Transformer
from .modes import MODES  # the generator's modes, said torch-free in zoo.modes
from .nvtx import annotate

GRAPH_BUCKET = 64
PREFILL_GRAPH_MAX_TOKENS = 16384


class Generator:
    """Runs ``prefill`` then ``decode`` steps for a fixed batch and maximum length.

    Args:
        model: a built ``Transformer``.
        batch: sequences per step.
        max_seq_len: prompt plus generated positions to hold in the cache.
        mode: one of ``MODES``.

    Raises:
        ValueError: unknown mode, or ``cudagraph``/``compile`` on a CPU model.
    """

    def __init__(self, model: Transformer, batch: int, max_seq_len: int, mode: str = "eager"):
        if mode not in MODES:
            raise ValueError(f"mode={mode!r} is not one of {', '.join(MODES)}")
        self.device = model.tok_embeddings.weight.device
        if mode != "eager" and self.device.type != "cuda":
            raise ValueError(f"mode={mode} needs a CUDA device; this model is on {self.device}")
        self.model, self.batch, self.max_seq_len, self.mode = model, batch, max_seq_len, mode
        model.setup_cache(batch, max_seq_len)
        self.pos = 0
        self._graphs: dict[int, tuple] = {}
        self._prefill_graphs: dict[tuple, tuple] = {}
        self._prefill_mode = "cudagraph" if mode == "cudagraph" else "eager"
        self._pool = None
        self._compiled = None
        self._warm: set[int] = set()  # compile mode: buckets run eagerly once (``_warm_up``)
        if mode != "eager":
            self._token = torch.zeros(batch, 1, dtype=torch.long, device=self.device)
            self._input_pos = torch.zeros(1, dtype=torch.long, device=self.device)
        self._greedy_graphs: dict[int, tuple] = {}
        self._pos_on_device: int | None = None  # what ``_input_pos`` holds, when known
        self.last_logits: torch.Tensor | None = None

    @torch.no_grad()
    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        """Run the prompt ``tokens [B, T]`` from position 0; return last-position logits ``[B, V]``.

        Raises:
            ValueError: the prompt is longer than ``max_seq_len``.
        """
        T = tokens.shape[1]
        if T > self.max_seq_len:
            raise ValueError(f"prompt of {T} tokens exceeds max_seq_len {self.max_seq_len}")
        self._prefill_mode = "cudagraph" if self._prefill_graphed(tokens) else "eager"
        with annotate("prefill"):
            if self._prefill_mode == "cudagraph":
                logits = self._prefill_replay(tokens)
            else:
                logits = self.prefill_step(tokens)[:, -1]
        self.pos = T
        return logits

    @property
    def prefill_mode(self) -> str:
        """How the last prefill ran (before any: how one of the default size would): ``cudagraph``
        (a captured graph per prompt shape) in ``cudagraph`` mode for at most
        ``PREFILL_GRAPH_MAX_TOKENS`` tokens (``batch * T``), else ``eager``."""
        return self._prefill_mode

    def _prefill_graphed(self, tokens: torch.Tensor) -> bool:
        return self.mode == "cudagraph" and tokens.numel() <= PREFILL_GRAPH_MAX_TOKENS

    def prefill_step(self, tokens: torch.Tensor) -> torch.Tensor:
        """The prefill's forward, run eagerly: ``tokens [B, T]`` -> logits ``[B, 1, V]``."""
        T = tokens.shape[1]
        return self.model(tokens, self.model.positions[:T], kv_len=T, last_only=True)

    def _prefill_replay(self, tokens: torch.Tensor) -> torch.Tensor:
        key = tuple(tokens.shape)
        if key not in self._prefill_graphs:
            buf = tokens.clone()
            graph, out = self._capture(lambda: self.prefill_step(buf)[:, -1])
            self._prefill_graphs[key] = (graph, out, buf)
        graph, out, buf = self._prefill_graphs[key]
        buf.copy_(tokens)
        graph.replay()
        return out.clone()  # the graph's output buffer is overwritten by the next replay

    @torch.no_grad()
    def decode(self, token: torch.Tensor) -> torch.Tensor:
        """One decode step for ``token [B, 1]`` at the current position; returns logits ``[B, V]``.

        Raises:
            ValueError: the cache is full (the position reached ``max_seq_len``).
        """
        pos = self._position()
        with annotate("decode"):
            if self.mode == "eager":
                out = self.model(token, self.model.positions[pos:pos + 1], kv_len=pos + 1)[:, 0]
            else:
                out = self._replay(token, pos)
        self.pos = pos + 1
        return out

    def _position(self) -> int:
        """The position the next decode step writes.

        Raises:
            ValueError: the cache is full (the position reached ``max_seq_len``).
        """
        if self.pos >= self.max_seq_len:
            raise ValueError(f"cache full: position {self.pos} of max_seq_len {self.max_seq_len}")
        return self.pos

    def _bucket(self, pos: int) -> int:
        if self.model.cfg.kernels == "triton":  # the decode kernel reads the length on device
            return self.max_seq_len
        return min(-(-(pos + 1) // GRAPH_BUCKET) * GRAPH_BUCKET, self.max_seq_len)

    def _step(self, kv_len: int):
        return self.model(self._token, self._input_pos, kv_len=kv_len, masked=True)[:, 0]

    @torch.no_grad()
    def decode_greedy(self, token: torch.Tensor) -> torch.Tensor:
        """One decode step and its greedy sample: ``token [B, 1]`` at the current position ->
        the next token ``[B, 1]`` int64, each row's argmax of the step's logits (ties: the first
        index). The step's logits ``[B, V]`` stay readable as ``last_logits`` until the next step.

        In ``cudagraph`` mode the returned tensor is the generator's own token input, which the
        next step overwrites: pass it back as the next step's ``token`` (no copy is made then) and
        clone it to keep it.

        Raises:
            ValueError: the cache is full (the position reached ``max_seq_len``).
        """
        if self.mode != "cudagraph":
            self.last_logits = self.decode(token)
            return self._sample(self.last_logits)
        pos = self._position()
        with annotate("decode"):
            kv_len = self._bucket(pos)
            if kv_len not in self._greedy_graphs:
                self._inputs(token, pos)
                held = self._token.clone()  # the warm-up's argmax writes the token input
                self._warm_up(lambda: self._greedy_step(kv_len, advance=False))
                self._token.copy_(held)
                self._greedy_graphs[kv_len] = self._capture(
                    lambda: self._greedy_step(kv_len, advance=True), warm=False)
            graph, logits = self._greedy_graphs[kv_len]
            self._inputs(token, pos)
            graph.replay()
        self._pos_on_device = pos + 1
        self.pos = pos + 1
        self.last_logits = logits
        return self._token

    def _sample(self, logits: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Greedy: ``logits [B, V]`` -> ``[B, 1]`` int64 (into ``out`` when given)."""
        if self.model.cfg.kernels == "triton" and logits.is_cuda:
            return argmax(logits, out=out)
        if out is None:
            return logits.argmax(-1, keepdim=True)
        return torch.argmax(logits, -1, keepdim=True, out=out)

    def _greedy_step(self, kv_len: int, advance: bool) -> torch.Tensor:
        # the step, its argmax into the token input, and (captured) the next position
        logits = self._step(kv_len)
        self._sample(logits, out=self._token)
        if advance:
            self._input_pos.add_(1)
        return logits

    def _inputs(self, token: torch.Tensor, pos: int) -> None:
        # the graph's token and position inputs; neither copied when it holds them already
        if token is not self._token:
            self._token.copy_(token)
        if self._pos_on_device != pos:
            self._input_pos.fill_(pos)
            self._pos_on_device = pos

    def _replay(self, token: torch.Tensor, pos: int) -> torch.Tensor:
        self._inputs(token, pos)
        kv_len = self._bucket(pos)
        if self.mode == "compile":
            if self._compiled is None:
                torch._dynamo.config.cache_size_limit = max(
                    torch._dynamo.config.cache_size_limit, self.max_seq_len // GRAPH_BUCKET + 2)
                self._compiled = torch.compile(self._step, mode="reduce-overhead", fullgraph=True)
            if kv_len not in self._warm:  # tile choices and autotuning before Inductor records
                self._warm_up(lambda: self._step(kv_len))
                self._warm.add(kv_len)
            return self._compiled(kv_len).clone()
        if kv_len not in self._graphs:
            self._graphs[kv_len] = self._capture(lambda: self._step(kv_len))
        graph, out = self._graphs[kv_len]
        graph.replay()
        return out.clone()  # the graph's output buffer is overwritten by the next replay

    @staticmethod
    def _warm_up(fn):
        # Run ``fn`` twice on a side stream: cuBLAS handles, workspaces, the kernels' tile choices
        # and Triton autotuning, none of which may happen inside a capture. It writes the step's
        # K/V at its positions, which the replay overwrites with the same values.
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(s)

    def _capture(self, fn, warm: bool = True):
        # warm up (``_warm_up``; unless the caller did), then capture ``fn``
        if warm:
            self._warm_up(fn)
        graph = torch.cuda.CUDAGraph()
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        with torch.cuda.graph(graph, pool=self._pool):
            out = fn()
        return graph, out


@torch.no_grad()
def generate(model: Transformer, prompt: torch.Tensor, new_tokens: int, mode: str = "eager"
             ) -> torch.Tensor:
    """Greedy decoding: ``prompt [B, T]`` -> ``[B, T + new_tokens]`` token ids.

    The cache holds ``T + new_tokens - 1`` positions: the last token is produced, never fed back.

    Raises:
        ValueError: ``new_tokens`` < 0.
    """
    B, T = prompt.shape
    if new_tokens < 0:
        raise ValueError(f"new_tokens must be >= 0, got {new_tokens}")
    if new_tokens == 0:
        return prompt.clone()
    gen = Generator(model, B, T + new_tokens - 1, mode)
    tok = gen.prefill(prompt).argmax(-1, keepdim=True)
    out = [prompt, tok]
    for _ in range(new_tokens - 1):
        tok = gen.decode_greedy(tok)
        out.append(tok.clone())  # in cudagraph mode the generator's own buffer
    return torch.cat(out, dim=1)
