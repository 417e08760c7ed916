"""Fused Triton kernels of the zoo, each beside its PyTorch reference (``reference``) and the public
op that launches it. Tests in ``tests/kernels/`` compare each kernel with its reference on random
inputs (on the CPU through ``TRITON_INTERPRET=1``); ``python -m kernels.bench`` measures them
against their DRAM roofline and the torch eager ops they replace."""
