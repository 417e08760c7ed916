#!/usr/bin/env bash
# The main job's gate on this tree, then the MoE experiment measured on the same machine.
#   bash bench/reference/run_moe_study.sh     # $OUT: gate/, moe_vs_dense/ (log, rows, report)
exec bash bench/reference/run_gate_study.sh moe_vs_dense
