#!/usr/bin/env bash
# The run to make first whenever a GPU is lent: at most about 8 minutes, one JSON line per check in
# OUT/gpu-run.jsonl and the same as a markdown table in OUT/gpu-run.md, to paste into
# docs/gpu-runs.md.
#
#   bash scripts/gpu-run.sh [--build DIR] [--data DIR] [--out DIR] [--quick]
#
# DIR defaults: build (a CUDA build; for a GPU machine without nvcc, make it here with
# -DCMAKE_CUDA_ARCHITECTURES=90 -DSTOKE_MARCH=x86-64-v3 and carry it), the Fashion-MNIST of
# scripts/install-deps.sh, and $OUT (the device tool's output folder) or gpu-run/. Each check has
# its own time limit, so one that hangs costs its limit, not the run:
#   1. stoke-gpu-selftest --quick (every op, kernel and vendor call against the CPU), and
#      compute-sanitizer memcheck on it when compute-sanitizer exists;
#   2. stoke-train --device cuda, one epoch of LeNet-5 and of ResNet-8 in fp32, --amp bf16 and
#      --amp fp16, and fp32 and fp16 with --cuda-graph, profiled: test accuracy, img/s, and the
#      profiler's kernel launches and host waits per step;
#   3. stoke-bench-ops-cuda --quick: stoke's kernels beside cuBLAS and cuDNN (its JSON line).
#   4. stoke-bench-train-cuda: ResNet-50 at 224x224 on synthetic data, batch 64, in fp32, TF32,
#      fp16 and bf16, eager and CUDA-graphed, NCHW and channels_last (cuDNN's NHWC convolutions):
#      img/s, MFU against the row precision's measured GEMM peak, launches and host waits per step
#      (--quick: its LeNet-5 smoke run).
# Without a GPU every binary says so and exits 0: the table then says "no GPU" and nothing failed.
set -uo pipefail

build=build
data=/usr/share/datasets/fashion-mnist
out=${OUT:-gpu-run}
quick=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --quick) quick=1; shift ;;  # this script's own test: 64 training images, no sanitizer
    *) echo "gpu-run: unknown argument '$1' (expected --build, --data, --out, --quick)" >&2; exit 2 ;;
  esac
done
for exe in apps/stoke-gpu-selftest apps/stoke-train bench/stoke-bench-ops-cuda; do
  if [[ ! -x $build/$exe ]]; then
    echo "gpu-run: $build/$exe is missing: build first (cmake --build $build)" >&2
    exit 2
  fi
done
mkdir -p "$out"
jsonl=$out/gpu-run.jsonl md=$out/gpu-run.md
: >"$jsonl"
start=$SECONDS

# json_escape STRING: the string as a JSON string's contents.
json_escape() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1])[1:-1])' "$1"; }

# record NAME STATUS SECONDS DETAIL: one JSON line (DETAIL: `"key":value,...` or empty).
record() {
  local detail=${4:+,$4}
  printf '{"check":"%s","status":"%s","seconds":%s%s}\n' "$(json_escape "$1")" "$2" "$3" \
    "$detail" >>"$jsonl"
  printf 'gpu-run: %-44s %-8s %4ss\n' "$1" "$2" "$3"
}

# check NAME LIMIT LOG COMMAND...: runs COMMAND under `timeout LIMIT`, output to LOG; sets
# $status to ok, failed (exit code), timeout or "no GPU" (a binary that found none) and $took.
check() {
  local name=$1 limit=$2 log=$3 t0=$SECONDS rc
  shift 3
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  took=$((SECONDS - t0))
  if [[ $rc == 124 || $rc == 137 ]]; then
    status=timeout
  elif grep -qiE "^skipped|no (cuda )?device|no gpu" "$log" && [[ $rc == 0 || $rc == 2 ]]; then
    status="no GPU"
  elif [[ $rc == 0 ]]; then
    status=ok
  else
    status="failed ($rc)"
  fi
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$out/gpu.txt" 2>&1 ||
  echo "no nvidia-smi" >"$out/gpu.txt"
gpu=$(head -1 "$out/gpu.txt")
echo "gpu-run: $gpu"

# 1. The selftest, then memcheck on it.
check "selftest --quick" 150 "$out/selftest.log" "$build/apps/stoke-gpu-selftest" --quick \
  --failures-only
summary=$(grep -E "checks?,? .*fail" "$out/selftest.log" | tail -1)
record "selftest --quick" "$status" "$took" "\"summary\":\"$(json_escape "$summary")\""
if [[ $quick == 0 && $status == ok ]] && command -v compute-sanitizer >/dev/null; then
  check "compute-sanitizer memcheck selftest" 150 "$out/memcheck.log" compute-sanitizer \
    --tool memcheck --error-exitcode 1 "$build/apps/stoke-gpu-selftest" --quick --in-process \
    --failures-only
  summary=$(grep -E "ERROR SUMMARY" "$out/memcheck.log" | tail -1)
  record "compute-sanitizer memcheck selftest" "$status" "$took" \
    "\"summary\":\"$(json_escape "$summary")\""
fi

# 2. Training: one epoch each (60,000 images; --quick: 64), profiled for the per-step counts.
train_limit=$((quick ? 64 : 60000))
for model in lenet5 resnet8; do
  # "+graph": the same with --cuda-graph (each step one graph replay after 3 eager steps).
  for mode in fp32 bf16 fp16 fp32+graph fp16+graph; do
    amp=${mode%+graph}
    name="stoke-train $model $mode"
    flags=(--device cuda --model "$model" --epochs 1 --batch 128 --limit-train "$train_limit"
           --data "$data" --no-progress --log-every 0 --profile "$out/trace-$model-$mode.json"
           --profile-steps 20:69)
    [[ $amp != fp32 ]] && flags+=(--amp "$amp")
    [[ $mode == *+graph ]] && flags+=(--cuda-graph)
    check "$name" 90 "$out/train-$model-$mode.log" "$build/apps/stoke-train" "${flags[@]}"
    log=$out/train-$model-$mode.log
    acc=$(sed -nE 's/.*\| test loss [0-9.]+ acc ([0-9.]+)%.*/\1/p' "$log" | tail -1)
    ips=$(sed -nE 's/.*\(([0-9.]+) img\/s, data wait.*/\1/p' "$log" | tail -1)
    launches=$(sed -nE 's/.*per step: ([0-9.]+) kernel launches.*/\1/p' "$log" | tail -1)
    waits=$(sed -nE 's/.*launches, ([0-9.]+) host waits.*/\1/p' "$log" | tail -1)
    mfu=$(sed -nE 's/.*\| MFU ([0-9.]+)% .*/\1/p' "$log" | tail -1)
    record "$name" "$status" "$took" \
      "\"test_acc\":${acc:-null},\"img_per_s\":${ips:-null},\"mfu_pct\":${mfu:-null},\"launches_per_step\":${launches:-null},\"host_waits_per_step\":${waits:-null}"
  done
done

# 3. The kernels beside the vendor's.
check "stoke-bench-ops-cuda --quick" 120 "$out/bench-ops-cuda.log" \
  "$build/bench/stoke-bench-ops-cuda" --quick
record "stoke-bench-ops-cuda --quick" "$status" "$took"

# 4. ResNet-50's synthetic throughput and MFU, eager and graphed, in every precision.
bench_train=$build/bench/stoke-bench-train-cuda
if [[ -x $bench_train ]]; then
  bflags=(--graph --batch 64 --steps 20 --warmup 3)
  ((quick)) && bflags=(--quick)
  check "stoke-bench-train-cuda resnet50" 180 "$out/bench-train-cuda.log" "$bench_train" \
    "${bflags[@]}"
  row_json=$(grep -E '^\{"bench":"train_cuda"' "$out/bench-train-cuda.log" | tail -1)
  record "stoke-bench-train-cuda resnet50" "$status" "$took" \
    "\"rows\":$(python3 -c 'import json,sys; print(json.dumps(json.loads(sys.argv[1])["rows"]) if sys.argv[1] else "null")' "$row_json")"
else
  record "stoke-bench-train-cuda resnet50" "missing" 0
fi

# The table.
{
  echo "GPU: $gpu; $(date -u +%Y-%m-%d), $((SECONDS - start)) s in all."
  echo
  echo "| check | status | s | result |"
  echo "| --- | --- | --- | --- |"
  python3 - "$jsonl" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    rest = ", ".join("%s %s" % (k, v) for k, v in r.items()
                     if k not in ("check", "status", "seconds") and v not in (None, ""))
    print("| %s | %s | %s | %s |" % (r["check"], r["status"], r["seconds"], rest))
EOF
} >"$md"
cat "$md"
# Failed if any check failed or ran out of time; "no GPU" is not a failure.
! grep -qE '"status":"(failed|timeout)' "$jsonl"
