#!/usr/bin/env bash
# The ranking models (configs/<model>.yaml) on the same generated data, locally and in async
# PS mode (2 pservers + 2 trainers, scripts/run_local.sh): test AUC and log loss, training
# examples/s, next to the generator's Bayes-optimal AUC, its data-limited limits (the true
# model with the ids seen < k times in the training split at their prior mean) and its
# estimation limit (every id at its posterior mean given the training rows and the true
# rest). Prints a markdown table.
#   bench/accuracy/models.sh [rows (default 1120000)] [models (default "ctr_dnn wide_deep deepfm dcn dlrm")]
#                            [modes (default "local async")] [epochs (default 2)]
#   DATAGEN_ARGS="--vocab 1000" bench/accuracy/models.sh ...   other generated data
# A mode may name a dense precision: "local:bf16" trains locally with fleetps.dense.precision
# bf16 (a copy of the YAML); its "vs local" column is then the difference to fp32.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD="${BUILD:-build}"
ROWS="${1:-1120000}"
MODELS="${2:-ctr_dnn wide_deep deepfm dcn dlrm}"
MODES="${3:-local async}"
EPOCHS="${4:-2}"
OUT="$BUILD/accuracy/models"
DATAGEN_ARGS="${DATAGEN_ARGS:-}"
DATA="$(realpath -m "$BUILD/accuracy/models_data_$ROWS$(echo "$DATAGEN_ARGS" | tr -c 'a-zA-Z0-9.\n' '_')")"  # absolute: the jobs run elsewhere
mkdir -p "$OUT"
if [ ! -f "$DATA/datagen.txt" ]; then
  "$BUILD/tools/datagen/fleetps-datagen" --out-dir "$DATA" --rows "$ROWS" --train-files 2 --seed 7 \
    --estimation-limit $DATAGEN_ARGS >"$DATA.txt"
  mv "$DATA.txt" "$DATA/datagen.txt"
fi

for model in $MODELS; do
  for spec in $MODES; do
    mode="${spec%%:*}"
    run="$OUT/${model}_${spec/:/_}"
    rm -rf "$run" && mkdir -p "$run"
    config="configs/$model.yaml"
    if [ "$spec" != "$mode" ]; then
      config="$run/job.yaml"
      sed -e '/^  dense: /d' -e "s/^fleetps:\$/fleetps:\n  dense: {precision: ${spec#*:}}/" "configs/$model.yaml" >"$config"
    fi
    start=$(date +%s.%N)
    if [ "$mode" = local ]; then
      "$BUILD/trainer/cpu-trainer" --config "$config" --train-data "$DATA/train" --test-data "$DATA/test" \
        --log-level warn --epochs "$EPOCHS" --report "$run/trainer0.json" >"$run/trainer0.log" 2>&1 ||
        echo "{\"failed\": true}" >"$run/trainer0.json"
    else
      FLEETPS_SKIP_SETUP=1 FLEETPS_CONFIG="$config" FLEETPS_SYNC_MODE=$mode FLEETPS_EPOCHS="$EPOCHS" \
        FLEETPS_TRAIN_DATA="$DATA/train" FLEETPS_TEST_DATA="$DATA/test" FLEETPS_OUT="$run" \
        FLEETPS_BASE_PORT=18900 scripts/run_local.sh >"$run/cluster.log" 2>&1 ||
        echo "{\"failed\": true}" >"$run/trainer0.json"
    fi
    python3 -c "print($(date +%s.%N) - $start)" >"$run/seconds"
    echo "$model $spec done" >&2
  done
done

python3 - "$OUT" "$DATA/datagen.txt" "$ROWS" "$MODELS" "$MODES" "$EPOCHS" <<'PY'
import glob, json, re, sys
out, datagen, rows, models, modes, epochs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(), sys.argv[5].split(), sys.argv[6]
text = open(datagen).read()
bayes = float(re.search(r"bayes test auc: ([0-9.]+)", text).group(1))
limits = {int(k): float(v) for k, v in re.findall(r"limit auc k=(\d+): ([0-9.]+)", text)}
estimation = float(re.search(r"estimation limit auc: ([0-9.]+)", text).group(1))
train_rows = re.search(r"rows:\s+(\d+) train", text).group(1)
print(f"models on {rows} generated rows ({train_rows} train), {epochs} epochs; test rows: Bayes AUC {bayes:.4f}, "
      + ", ".join(f"data-limited limit k={k} {v:.4f}" for k, v in sorted(limits.items()))
      + f", estimation limit {estimation:.4f}")
print()
print("| model | mode | test AUC | vs local | of the way to limit k=1 | of the way to estimation limit | test log loss | train examples/s | wall s |")
print("|---|---|---|---|---|---|---|---|---|")
for model in models:
    local = None
    for mode in modes:
        run = f"{out}/{model}_{mode.replace(':', '_')}"
        secs = float(open(f"{run}/seconds").read())
        reports = [json.load(open(p)) for p in sorted(glob.glob(f"{run}/trainer*.json"))]
        if any(r.get("failed") for r in reports):
            print(f"| {model} | {mode} | failed | - | - | - | - | - | {secs:.0f} |")
            continue
        t = reports[0]["test"]
        if mode == "local":
            local = t["auc"]
        examples = sum(e["examples"] for r in reports for e in r["epochs"])
        train_secs = max(sum(e["seconds"] for e in r["epochs"]) for r in reports)
        way = (t["auc"] - 0.5) / (limits[1] - 0.5)
        way_estimated = (t["auc"] - 0.5) / (estimation - 0.5)
        diff = f"{t['auc'] - local:+.4f}" if local is not None else "-"
        print(f"| {model} | {mode} | {t['auc']:.4f} | {diff} | {way:.1%} | {way_estimated:.1%} | {t['loss']:.4f} | {examples / train_secs:.0f} | {secs:.0f} |")
PY
