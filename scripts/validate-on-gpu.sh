#!/usr/bin/env bash
# Real-GPU check of the agent (docs/validation.md): runs the release binary with the console
# exporter for ~36 s (8 s idle, then a bf16 matmul load in PyTorch), while nvidia-smi samples
# the same fields every second; then the whole-process benchmark (benches/compare.py).
# Writes everything to $OUT (default /tmp/gpu-validation). Needs: nvidia-smi, python3 with
# torch and nvidia-ml-py, the binary at $BIN (default target/release/gpu-otel-sidecar).
set -u
OUT=${OUT:-/tmp/gpu-validation}
BIN=${BIN:-target/release/gpu-otel-sidecar}
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
echo "== machine"; date -u; uname -a; nvidia-smi -L; nvidia-smi --query-gpu=driver_version,name,uuid,pci.bus_id,vbios_version,serial --format=csv
ldd --version | head -1; ldd "$BIN"; ls -l "$BIN"

cat > /tmp/load.py <<'PY'
import sys, time, torch
secs = float(sys.argv[1])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + secs
n = 0
while time.time() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize(); n += 20
print(f"load: {n} matmuls, {n * 2 * 8192**3 / secs / 1e12:.0f} TFLOP/s", flush=True)
PY

Q=timestamp,index,uuid,utilization.gpu,utilization.memory,memory.used,memory.free,memory.total,temperature.gpu,temperature.memory,power.draw,enforced.power.limit,clocks.gr,clocks.sm,clocks.mem,clocks_event_reasons.active,pstate,ecc.errors.corrected.volatile.total
# TZ=UTC: nvidia-smi prints its timestamp in local time; the agent's are UTC (Unix nanoseconds).
TZ=UTC nvidia-smi --query-gpu=$Q --format=csv,nounits -lms 1000 > "$OUT/nvidia-smi.csv" 2>&1 &
SMI=$!
echo "== agent (console exporter), 36 s"
START=$(date +%s.%N)
# Energy read at every export (1 s; the default is 10 s): the energy check compares the
# counter's growth with the measured power over the idle and load windows, within 2 %.
OTEL_METRICS_EXPORTER=console GPU_SIDECAR_SAMPLE_INTERVAL=1s OTEL_METRIC_EXPORT_INTERVAL=1000 \
  GPU_SIDECAR_ENERGY_INTERVAL=1s \
  K8S_POD_NAME=validation-pod K8S_NAMESPACE_NAME=validation K8S_CONTAINER_NAME=trainer \
  "$BIN" > "$OUT/agent-metrics.jsonl" 2> "$OUT/agent.log" &
AGENT=$!
sleep 8
python3 /tmp/load.py 26 > "$OUT/load.log" 2>&1 &
LOAD=$!
sleep 12
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,nounits > "$OUT/compute-apps.csv"
sleep 16
kill -TERM $AGENT; wait $AGENT; echo "agent exit code: $?"
kill $SMI 2>/dev/null; wait $LOAD; cat "$OUT/load.log"
echo "agent started at $START"; tail -5 "$OUT/agent.log"; wc -l "$OUT/agent-metrics.jsonl" "$OUT/nvidia-smi.csv"

if [ -f benches/compare.py ]; then
  echo "== whole-process benchmark"
  python3 benches/compare.py --agent "$BIN" --seconds 15 --out "$OUT/bench.json" || echo "bench failed: $?"
fi
# let tee write the end of run.log before $OUT is collected
exec >&- 2>&-; sleep 1
