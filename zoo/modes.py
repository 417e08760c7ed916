"""The decode modes a ``Generator`` runs (torch-free, so a plan checks ``mode=`` before torch loads).

``eager``: one Python call per layer and kernel per step; ``cudagraph``: each step replayed from a
captured CUDA graph per batch bucket; ``compile``: ``torch.compile`` (Inductor) of the step, its
graphs captured (CUDA only).
"""

MODES = ("eager", "cudagraph", "compile")
