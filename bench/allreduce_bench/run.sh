#!/usr/bin/env bash
# allreduce_bench end to end: loopback TCP bandwidth (iperf3), the Gloo allreduce's time
# and bus bandwidth from 1 KB to 64 MB (allreduce_bench), and a 2-rank collective MLP run
# (32 inputs -> 1024 -> 1024 -> 2, 1.1M parameters, launched with
# scripts/launch_collective.sh) in three settings: one bucket sent after the backward pass,
# 1 MB buckets sent after it, and 1 MB buckets sent from within it (overlap). Prints the
# seconds each rank spent waiting for allreduces per epoch.
#   bench/allreduce_bench/run.sh [rows (default 40000)]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD="${BUILD:-build}"
ROWS="${1:-40000}"
OUT="$BUILD/allreduce_bench"
mkdir -p "$OUT"

echo "== loopback TCP (iperf3, 3 s)"
iperf3 -s -1 -p 15201 >/dev/null 2>&1 &
sleep 0.5
iperf3 -c 127.0.0.1 -p 15201 -t 3 -f g 2>/dev/null | awk '/receiver/ {print "iperf3 loopback: " $7 " " $8}'
wait || true

echo "== Gloo allreduce"
"$BUILD/bench/allreduce_bench/allreduce_bench" --seconds 1

DATA="$(realpath -m "$OUT/mlp_data_$ROWS")"  # absolute: the jobs run elsewhere
if [ ! -f "$DATA/data.yaml" ]; then
  "$BUILD/tools/datagen/fleetps-datagen" --out-dir "$DATA" --rows "$ROWS" --format multislot --slots 1 \
    --dense-dim 32 --train-files 2 --seed 3 >/dev/null
fi
echo "== 2-rank MLP (1.1M parameters), per-rank batch 256, 1 epoch"
echo "| setting | steps | wait for allreduces, s (rank 0) | epoch s (rank 0) |"
echo "|---|---|---|---|"
for setting in "one-bucket:1024:false" "buckets:1:false" "buckets+overlap:1:true"; do
  IFS=: read -r name fuse overlap <<<"$setting"
  sed -e "s/fc_sizes: \[64, 64\]/fc_sizes: [1024, 1024]/" -e "s/train_batch_size: 64/train_batch_size: 256/" \
    configs/mlp.yaml >"$OUT/mlp_$name.yaml"
  printf 'fleetps:\n  collective: {fuse_grad_size_in_MB: %s, overlap: %s, lr_scaling: none}\n' "$fuse" "$overlap" \
    >>"$OUT/mlp_$name.yaml"
  scripts/launch_collective.sh --nproc 2 --log_dir "$OUT/logs_$name" "$BUILD/trainer/cpu-trainer" \
    --config "$OUT/mlp_$name.yaml" --train-data "$DATA/train" --epochs 1 --report "$OUT/$name.json" >/dev/null
  line=$(grep -h "waiting for allreduces" "$OUT/logs_$name/workerlog.0" | tail -1)
  steps=$(echo "$line" | sed -E 's/.*: ([0-9]+) steps.*/\1/')
  wait_s=$(echo "$line" | sed -E 's/.* ([0-9.]+) s waiting.*/\1/')
  secs=$(python3 -c "import json; print(round(json.load(open('$OUT/$name.json'))['epochs'][0]['seconds'], 2))")
  echo "| $name | $steps | $wait_s | $secs |"
done
