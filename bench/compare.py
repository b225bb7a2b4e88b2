#!/usr/bin/env python3
"""Whole-process benchmark: CPU per sample and peak RSS of the agent, side by side with the
two approaches people use today (a pynvml polling loop, an nvidia-smi spawn per sample).

Each approach runs as a child process for --seconds; CPU (user + system) and peak RSS come
from wait4(2) rusage, so they count the whole process, NVML library included. The pynvml
loop also times its raw NVML calls (thread CPU time around the calls only): the NVML calls'
own cost, to which the agent's CPU per sample is compared.

  python3 bench/compare.py --agent target/release/gpu-otel-sidecar --seconds 15
  python3 bench/compare.py --agent target/release/gpu-otel-sidecar --seconds 15 \
      --nvml-lib target/release/libnvml_mock.so --scenario tests/scenarios/h200-under-load.json

With --nvml-lib (the mock) only the agent runs: pynvml and nvidia-smi need a real driver.
Standard library only.
"""
import argparse, json, os, shutil, signal, subprocess, sys, tempfile, textwrap, time

PYNVML_LOOP = textwrap.dedent("""
    import sys, time, pynvml as n
    interval, seconds, out = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    n.nvmlInit()
    hs = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
    reasons = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or n.nvmlDeviceGetCurrentClocksThrottleReasons
    def safe(f, *a):
        try: return f(*a)
        except n.NVMLError: return None
    calls_cpu, ticks, rows = 0.0, 0, []
    end = time.monotonic() + seconds
    nxt = time.monotonic()
    while time.monotonic() < end:
        t0 = time.thread_time()
        for h in hs:
            rows.append((safe(n.nvmlDeviceGetUtilizationRates, h), safe(n.nvmlDeviceGetEncoderUtilization, h),
                safe(n.nvmlDeviceGetDecoderUtilization, h), safe(n.nvmlDeviceGetMemoryInfo, h),
                safe(n.nvmlDeviceGetTemperature, h, 0), safe(n.nvmlDeviceGetFieldValues, h, [82]),
                safe(n.nvmlDeviceGetPowerUsage, h), safe(n.nvmlDeviceGetEnforcedPowerLimit, h),
                safe(n.nvmlDeviceGetTotalEnergyConsumption, h), safe(n.nvmlDeviceGetClockInfo, h, 0),
                safe(n.nvmlDeviceGetClockInfo, h, 1), safe(n.nvmlDeviceGetClockInfo, h, 2),
                safe(reasons, h), safe(n.nvmlDeviceGetPerformanceState, h),
                safe(n.nvmlDeviceGetTotalEccErrors, h, 0, 0), safe(n.nvmlDeviceGetTotalEccErrors, h, 1, 0),
                safe(n.nvmlDeviceGetComputeRunningProcesses, h)))
        calls_cpu += time.thread_time() - t0
        rows.clear()
        ticks += 1
        nxt += interval
        time.sleep(max(0.0, nxt - time.monotonic()))
    n.nvmlShutdown()
    open(out, "w").write(f"{ticks} {calls_cpu}")
""")

SMI_QUERY = ("utilization.gpu,utilization.memory,memory.used,memory.total,temperature.gpu,"
             "temperature.memory,power.draw,enforced.power.limit,clocks.gr,clocks.sm,clocks.mem,"
             "clocks_event_reasons.active,pstate,ecc.errors.corrected.volatile.total")


def run_child(argv, env, seconds, stop_with_signal=True):
    """Runs argv, returns (wall_s, cpu_s, maxrss_kib, exit, stderr)."""
    t0 = time.monotonic()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if stop_with_signal:
        time.sleep(seconds)
        p.send_signal(signal.SIGTERM)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    err = p.stderr.read().decode(errors="replace")
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        print(f"{argv[0]} exited {code}: {err[-2000:]}", file=sys.stderr)
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss, code, err


def agent(binary, interval, seconds, extra_env):
    # Keep the caller's environment (LD_LIBRARY_PATH is where many images put libnvidia-ml.so.1);
    # drop its OTEL_* / GPU_SIDECAR_* / K8S_* settings so that only the ones below apply.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "GPU_SIDECAR_", "K8S_"))}
    env.update({"OTEL_METRICS_EXPORTER": "console",
           "OTEL_METRIC_EXPORT_INTERVAL": "10000", "GPU_SIDECAR_SAMPLE_INTERVAL": f"{int(interval * 1000)}ms",
           "GPU_SIDECAR_LOG_LEVEL": "warn", **extra_env})
    wall, cpu, rss, code, err = run_child([binary], env, seconds)
    if err.strip():  # warnings and errors: an agent that never reached NVML would look cheap
        print(f"agent ({interval} s) logged:\n{err[-2000:]}", file=sys.stderr)
    ticks = int(wall / interval) + 1
    return {"approach": "gpu-otel-sidecar", "interval_s": interval, "wall_s": round(wall, 2), "ticks": ticks,
            "cpu_s": round(cpu, 4), "cpu_us_per_sample": round(cpu / ticks * 1e6, 1), "peak_rss_kib": rss, "exit": code}


def pynvml(interval, seconds):
    with tempfile.NamedTemporaryFile("r", suffix=".txt") as out:
        wall, cpu, rss, code, _ = run_child([sys.executable, "-c", PYNVML_LOOP, str(interval), str(seconds), out.name],
                                         dict(os.environ), seconds, stop_with_signal=False)
        ticks, calls_cpu = out.read().split()
    ticks, calls_cpu = int(ticks), float(calls_cpu)
    return {"approach": "pynvml loop", "interval_s": interval, "wall_s": round(wall, 2), "ticks": ticks,
            "cpu_s": round(cpu, 4), "cpu_us_per_sample": round(cpu / ticks * 1e6, 1), "peak_rss_kib": rss,
            "nvml_calls_cpu_us_per_sample": round(calls_cpu / ticks * 1e6, 1), "exit": code}


def smi(interval, seconds):
    before = os.times()
    t0 = time.monotonic()
    ticks, nxt, maxrss = 0, time.monotonic(), 0
    while time.monotonic() - t0 < seconds:
        p = subprocess.Popen(["nvidia-smi", f"--query-gpu={SMI_QUERY}", "--format=csv"], stdout=subprocess.DEVNULL)
        _, _, ru = os.wait4(p.pid, 0)
        maxrss = max(maxrss, ru.ru_maxrss)
        ticks += 1
        nxt += interval
        time.sleep(max(0.0, nxt - time.monotonic()))
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return {"approach": "nvidia-smi per sample", "interval_s": interval, "wall_s": round(time.monotonic() - t0, 2),
            "ticks": ticks, "cpu_s": round(cpu, 4), "cpu_us_per_sample": round(cpu / ticks * 1e6, 1),
            "peak_rss_kib": maxrss, "exit": 0}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agent", required=True)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--intervals", default="1,0.1", help="sample intervals in seconds, comma-separated")
    ap.add_argument("--nvml-lib", help="mock NVML library (agent only)")
    ap.add_argument("--scenario", help="NVML_MOCK_SCENARIO for the mock")
    ap.add_argument("--out", help="write the results as JSON here")
    a = ap.parse_args()
    extra = {}
    if a.nvml_lib:
        extra = {"GPU_SIDECAR_NVML_LIBRARY": os.path.abspath(a.nvml_lib), "NVML_MOCK_SCENARIO": os.path.abspath(a.scenario)}
    rows = []
    for interval in [float(x) for x in a.intervals.split(",")]:
        rows.append(agent(a.agent, interval, a.seconds, extra))
        if not a.nvml_lib:
            try:
                rows.append(pynvml(interval, a.seconds))
            except Exception as e:  # pynvml missing: say so, go on
                print(f"pynvml loop skipped: {e}", file=sys.stderr)
            if shutil.which("nvidia-smi") and interval >= 0.5:
                rows.append(smi(interval, a.seconds))
    raw = {r["interval_s"]: r["nvml_calls_cpu_us_per_sample"] for r in rows if "nvml_calls_cpu_us_per_sample" in r}
    for r in rows:
        if r["approach"] == "gpu-otel-sidecar" and r["interval_s"] in raw and raw[r["interval_s"]] > 0:
            r["ratio_to_raw_nvml_calls"] = round(r["cpu_us_per_sample"] / raw[r["interval_s"]], 2)
    size = os.path.getsize(a.agent)
    print(f"agent binary: {size} bytes ({size / 1e6:.2f} MB)")
    print(f"{'approach':24} {'interval':>8} {'ticks':>6} {'CPU us/sample':>14} {'peak RSS MiB':>13} {'raw NVML us':>12}")
    for r in rows:
        print(f"{r['approach']:24} {r['interval_s']:>8} {r['ticks']:>6} {r['cpu_us_per_sample']:>14} "
              f"{r['peak_rss_kib'] / 1024:>13.1f} {r.get('nvml_calls_cpu_us_per_sample', ''):>12}")
    if a.out:
        json.dump({"binary_bytes": size, "rows": rows}, open(a.out, "w"), indent=2)


if __name__ == "__main__":
    main()
