#!/usr/bin/env bash
# Each group in its own process: a device-side fault poisons only its own context.
cd "$(dirname "$0")/../.."
exp=benchmarks/experiments/graph_updates.py
for n in 4096 1048576; do
    python3 $exp costs $n plain host1 host1_upload torch_copy lp_plain lp_new1 lp_new20
    python3 $exp costs $n dev_in
    python3 $exp costs $n dev_out
done
for n in 65536 16777216 67108864; do
    python3 $exp costs $n plain lp_new20 torch_copy
    python3 $exp costs $n dev_in
done
python3 $exp survey
