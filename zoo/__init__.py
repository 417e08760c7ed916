"""designzoo model zoo: one parametric decoder-only transformer, its configs and analytic counts."""

from .config import TINY, DesignError, ModelConfig, presets
from .generate import Generator, generate
from .model import Transformer

__all__ = ["TINY", "DesignError", "Generator", "ModelConfig", "Transformer", "generate", "presets"]
