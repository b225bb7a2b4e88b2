#!/usr/bin/env bash
# Real-GPU check of the profiling rules (issue 17), not yet run on a GPU: the release binary
# with GPM read every second and tensor_cores_idle held for 30 s (instead of 5 min), while
# PyTorch runs an fp32 torch.matmul loop for 60 s (TF32 off: no tensor math), rests 40 s,
# then a bf16 loop for 60 s. Expected: one nvidia.gpu.alert.tensor_cores_idle firing during
# the fp32 loop (and its resolution after it), none during the bf16 loop; the run report's
# tensor activity near 0 for the first and high for the second (see the report's means).
# Writes everything to $OUT (default /tmp/gpu-efficiency). Needs: python3 with torch, a GPU
# with GPM (Hopper or newer), the binary at $BIN (default target/release/gpu-otel-sidecar).
# Exit status: 0 when the expectation holds, 1 otherwise.
set -u
OUT=${OUT:-/tmp/gpu-efficiency}
BIN=${BIN:-target/release/gpu-otel-sidecar}
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
echo "== machine"; date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version,name --format=csv

cat > "$OUT/load.py" <<'PY'
import sys, time, torch
dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[sys.argv[1]]
secs = float(sys.argv[2])
torch.backends.cuda.matmul.allow_tf32 = False  # fp32 stays off the tensor cores
a = torch.randn(8192, 8192, device="cuda", dtype=dtype)
b = torch.randn(8192, 8192, device="cuda", dtype=dtype)
print(f"{sys.argv[1]} start {time.time():.3f}", flush=True)
end = time.time() + secs
n = 0
while time.time() < end:
    for _ in range(10):
        c = a @ b
    torch.cuda.synchronize(); n += 10
print(f"{sys.argv[1]} end {time.time():.3f}: {n} matmuls, {n * 2 * 8192**3 / secs / 1e12:.0f} TFLOP/s", flush=True)
PY

echo "== agent: events and the run report on stdout"
OTEL_METRICS_EXPORTER=none OTEL_LOGS_EXPORTER=console GPU_SIDECAR_REPORT_FILE="$OUT/report.json" \
  GPU_SIDECAR_SAMPLE_INTERVAL=1s GPU_SIDECAR_GPM_INTERVAL=1s \
  GPU_SIDECAR_RULE_TENSOR_CORES_IDLE_DURATION=30s GPU_SIDECAR_RULE_MEMORY_BOUND_DURATION=30s \
  "$BIN" > "$OUT/agent-events.jsonl" 2> "$OUT/agent.log" &
AGENT=$!
sleep 5
python3 "$OUT/load.py" fp32 60 > "$OUT/load.log" 2>&1
sleep 40
python3 "$OUT/load.py" bf16 60 >> "$OUT/load.log" 2>&1
sleep 5
kill -TERM $AGENT; wait $AGENT; echo "agent exit code: $?"
cat "$OUT/load.log"

python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
phases = {}
for line in open(f"{out}/load.log"):
    w = line.split()
    if len(w) >= 3 and w[1] in ("start", "end"):
        phases.setdefault(w[0], {})[w[1]] = float(w[2].rstrip(":"))
records = []
for line in open(f"{out}/agent-events.jsonl"):
    if not line.startswith('{"resourceLogs"'):
        continue
    for rl in json.loads(line)["resourceLogs"]:
        for sl in rl["scopeLogs"]:
            for r in sl["logRecords"]:
                attrs = {a["key"]: list(a["value"].values())[0] for a in r.get("attributes", [])}
                records.append((int(r["timeUnixNano"]) / 1e9, r.get("eventName", ""), attrs))
idle = [(t, a.get("nvidia.gpu.alert.state")) for t, n, a in records if n == "nvidia.gpu.alert.tensor_cores_idle"]
print("tensor_cores_idle records:", idle)
fired = [t for t, s in idle if s == "firing"]
fp32, bf16 = phases["fp32"], phases["bf16"]
ok = len(fired) == 1 and fp32["start"] <= fired[0] <= fp32["end"] + 1
ok = ok and not any(bf16["start"] <= t <= bf16["end"] for t in fired)
report = json.load(open(f"{out}/report.json"))
for g in report["gpus"]:
    keys = ["utilization_mean", "sm_activity_mean", "tensor_activity_mean", "dram_activity_mean",
            "tensor_active_share_of_busy", "memory_pattern"]
    print(g["uuid"], {k: g.get(k) for k in keys})
print("expectation", "holds" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
STATUS=$?
exec >&- 2>&-; sleep 1
exit $STATUS
