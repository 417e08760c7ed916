"""A toy FFN kind, ReLU^2 (So et al. 2021, Primer, arXiv:2109.08668: ``w2(relu(x W1)^2)``), in
one module: its ``nn.Module`` and its registration. ``tests/test_components.py`` shows a design
using it counted, priced, run on the CPU and reported with no edit anywhere else."""

import torch

from zoo.ffn import DenseFFN, register
from zoo.model import FeedForward


class ReluSquaredFFN(FeedForward):
    """``w2(relu(x W1)^2)``: one input projection (``w13 [ffn_dim, d_model]``), no gate.
    x: ``[B, T, d_model]`` -> ``[B, T, d_model]``."""

    def act(self, h: torch.Tensor) -> torch.Tensor:
        """``relu(h)^2``, ``[..., ffn_dim]`` -> the same."""
        return torch.relu(h).square()


# one projection in, the activation two kernels of its own (relu, square; priced as the SwiGLU
# entry: the same three elements per hidden unit), 2 FLOP per hidden unit
KIND = DenseFFN("relu2", 1, act_flops=2, act_launches=2, module=f"{__name__}:ReluSquaredFFN")
register(KIND)
