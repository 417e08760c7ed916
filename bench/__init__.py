"""Probes and GPU session scripts: each run on a GPU machine, its tables written where its
record in ``results/reference/`` says (``python -m bench.<name>``, ``bash bench/<name>.sh``).
May import every layer (zoo, kernels, sweep); nothing imports bench.
"""
