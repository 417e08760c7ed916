"""Measurement: timers, and (profiling issue) NVML, torch.profiler, ncu, nsys, cuBLASLt log."""
