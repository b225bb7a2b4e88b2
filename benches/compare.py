#!/usr/bin/env python3
"""Whole-process benchmark: CPU per sample and peak RSS of the agent, side by side with the
two approaches people use today (a pynvml polling loop, an nvidia-smi spawn per sample).

Each approach runs as a child process for --seconds; CPU (user + system) comes from wait4(2)
rusage and counts the whole process (start-up, NVML library, shutdown). The pynvml
loop also times its raw NVML calls (thread CPU time around the calls only): the NVML calls'
own cost, to which the agent's CPU per sample is compared.

  python3 benches/compare.py --agent target/release/gpu-otel-sidecar --seconds 15
  python3 benches/compare.py --agent target/release/gpu-otel-sidecar --seconds 15 \
      --nvml-lib target/release/libnvml_mock.so --scenario tests/scenarios/h200-under-load.json

With --nvml-lib (the mock) only the agent runs: pynvml and nvidia-smi need a real driver, and
the agent's ticks are counted, not estimated: the mock's call log (NVML_MOCK_CALL_LOG) gives
the number of nvmlDeviceGetMemoryInfo_v2 calls, one per device per tick (the final sample
included). On a real driver the count is nominal: wall / interval + 1.

Besides CPU per sample and peak RSS, for the agent:
- RSS after --rss-ticks ticks (default 10^4) at --rss-interval (default 1 ms with the mock,
  10 ms on a real driver, where one tick costs ~5 ms): VmRSS from /proc/PID/status, read
  once the count is reached, then the process is stopped;
- time to first export: from spawn to the first OTLP/JSON line of the console exporter on
  stdout, and to the "sampling started" log line (NVML up, devices listed) on stderr, at
  1 s sample and export intervals and at the defaults (5 s, 10 s);
- per thread, in steady state (from 2 s after start to the signal): CPU ms per second and
  wake-ups per second, from /proc/PID/task/TID/schedstat and voluntary context switches;
- the release binary's size.
Peak RSS: from `/usr/bin/time -v` (the agent and the pynvml loop run under it when it exists),
because wait4's ru_maxrss of a child that Python spawns is at least Python's own high-water
mark (see run_child); without it, VmHWM read just before SIGTERM.
Standard library only.
"""
import argparse, json, os, re, selectors, shutil, signal, subprocess, sys, tempfile, textwrap, time

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


TIME_V = "/usr/bin/time"


def run_child(argv, env, seconds, stop_with_signal=True, time_v=False):
    """Runs argv; returns (wall_s, cpu_s, peak_rss_kib, exit, stderr, how the RSS was measured).

    CPU (user + system) comes from wait4(2). Peak RSS does not: a child that Python starts
    inherits, through vfork and exec, the Python process's own high-water mark in ru_maxrss
    (~14 MiB here), so wait4 cannot see a smaller peak. With time_v, argv runs under
    `/usr/bin/time -v` (a small parent; the signal goes to argv's process, time's child) and
    its "Maximum resident set size" is the peak; wait4's CPU then includes time's own
    (~1 ms per run). Without it, the peak is VmHWM from /proc/PID/status read just before the
    signal (shutdown not included), or wait4's ru_maxrss for a child that ends by itself."""
    report = tempfile.NamedTemporaryFile("r", suffix=".time") if time_v else None
    if report:
        argv = [TIME_V, "-v", "-o", report.name] + list(argv)
    t0 = time.monotonic()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    hwm, threads = None, None
    if stop_with_signal:
        target = child_of(p.pid) if report else p.pid
        warm = min(2.0, seconds / 4)
        time.sleep(warm)
        t1, before = time.monotonic(), thread_times(target)
        time.sleep(max(0.0, seconds - warm))
        t2, after = time.monotonic(), thread_times(target)
        threads = {name: {"cpu_ms_per_s": round((after[k][0] - before[k][0]) / 1e6 / (t2 - t1), 3),
                          "wakeups_per_s": round((after[k][1] - before[k][1]) / (t2 - t1), 1)}
                   for k, name in ((k, k[1]) for k in after) if k in before}
        hwm = proc_status_kib(target, "VmHWM")
        os.kill(target, signal.SIGTERM)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    err = p.stderr.read().decode(errors="replace")
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        print(f"{argv[0]} exited {code}: {err[-2000:]}", file=sys.stderr)
    tv = parse_time_v(report.read()) if report else None
    if report:
        report.close()
    if tv and "max_rss_kib" in tv:
        rss, how = tv["max_rss_kib"], "/usr/bin/time -v"
    elif hwm is not None:
        rss, how = hwm, "VmHWM before SIGTERM"
    else:
        rss, how = ru.ru_maxrss, "wait4 ru_maxrss"
    return wall, ru.ru_utime + ru.ru_stime, rss, code, err, how, threads


def thread_times(pid):
    """{(tid, thread name): (on-CPU ns, voluntary context switches)} from /proc/PID/task."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        base = f"/proc/{pid}/task/{tid}"
        try:
            name = open(f"{base}/comm").read().strip()
            ns = int(open(f"{base}/schedstat").read().split()[0])
            vol = int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", open(f"{base}/status").read(), re.M).group(1))
        except (OSError, AttributeError, ValueError):
            continue
        out[(tid, name)] = (ns, vol)
    return out


def proc_status_kib(pid, key):
    try:
        m = re.search(rf"^{key}:\s+(\d+) kB", open(f"/proc/{pid}/status").read(), re.M)
    except OSError:
        return None
    return int(m.group(1)) if m else None


def child_of(pid):
    """The first child of pid (the program that /usr/bin/time runs)."""
    for _ in range(200):
        try:
            kids = open(f"/proc/{pid}/task/{pid}/children").read().split()
        except OSError:
            kids = []
        if kids:
            return int(kids[0])
        time.sleep(0.01)
    return pid


def parse_time_v(text):
    """user + system seconds, maximum RSS (KiB) and exit status from `/usr/bin/time -v`."""
    def field(name):
        m = re.search(rf"^\s*{re.escape(name)}: (.+)$", text, re.M)
        return m.group(1).strip() if m else None
    try:
        return {"cpu_s": round(float(field("User time (seconds)")) + float(field("System time (seconds)")), 4),
                "max_rss_kib": int(field("Maximum resident set size (kbytes)")),
                "exit_status": int(field("Exit status"))}
    except (TypeError, ValueError):
        return {"unparsed": text[-500:]}


# Arguments after the agent binary (`--agent-arg node`: node mode).
AGENT_ARGS = []


def agent_env(interval, extra_env, export_ms=10000, log_level="warn"):
    # Keep the caller's environment (LD_LIBRARY_PATH is where many images put libnvidia-ml.so.1);
    # drop its OTEL_* / GPU_SIDECAR_* / K8S_* / NVML_MOCK_* settings so only the ones below apply.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "GPU_SIDECAR_", "K8S_", "NVML_MOCK_"))}
    env.update({"OTEL_METRICS_EXPORTER": "console", "GPU_SIDECAR_LOG_LEVEL": log_level, **extra_env})
    if interval is not None:
        env["GPU_SIDECAR_SAMPLE_INTERVAL"] = f"{int(round(interval * 1000))}ms"
    if export_ms is not None:
        env["OTEL_METRIC_EXPORT_INTERVAL"] = str(export_ms)
    return env


class CallLog:
    """The mock's call counts (NVML_MOCK_CALL_LOG): ticks = memory-info calls / devices."""

    def __init__(self, devices):
        self.devices = devices
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "calls.json")

    def ticks(self):
        try:
            calls = json.load(open(self.path))
        except (OSError, ValueError):
            return 0
        return calls.get("nvmlDeviceGetMemoryInfo_v2", 0) // self.devices


def mock_devices(scenario):
    return len(json.load(open(scenario))["devices"])


def agent(binary, interval, seconds, extra_env, mock=None, time_v=False):
    env = agent_env(interval, extra_env)
    log = CallLog(mock) if mock else None
    if log:
        env["NVML_MOCK_CALL_LOG"] = log.path
        # Written at nvmlShutdown only: a periodic write costs ~1 ms of the sampler's CPU.
        env["NVML_MOCK_CALL_LOG_PERIOD_S"] = "1e9"
    wall, cpu, rss, code, err, how, threads = run_child([binary, *AGENT_ARGS], env, seconds, time_v=time_v)
    if err.strip():  # warnings and errors: an agent that never reached NVML would look cheap
        print(f"agent ({interval} s) logged:\n{err[-2000:]}", file=sys.stderr)
    ticks = log.ticks() if log else int(wall / interval) + 1
    row = {"approach": "gpu-otel-sidecar", "interval_s": interval, "wall_s": round(wall, 2), "ticks": ticks,
           "ticks_counted": bool(log), "cpu_s": round(cpu, 4), "cpu_us_per_sample": round(cpu / max(ticks, 1) * 1e6, 1),
           "peak_rss_kib": rss, "peak_rss_from": how, "threads_steady": threads, "exit": code}
    return row


def rss_after_ticks(binary, interval, n, extra_env, mock=None, limit_s=600):
    """Runs the agent until n ticks, reads VmRSS and VmHWM, stops it; CPU from wait4."""
    env = agent_env(interval, extra_env)
    log = CallLog(mock) if mock else None
    if log:
        env["NVML_MOCK_CALL_LOG"] = log.path
        # The mock's latencies are sleeps: they cost no memory, only ticks per second.
        env["NVML_MOCK_NO_LATENCY"] = "1"
    t0 = time.monotonic()
    p = subprocess.Popen([binary, *AGENT_ARGS], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ticks = 0
    while time.monotonic() - t0 < limit_s and p.poll() is None:
        time.sleep(0.2)
        ticks = log.ticks() if log else int((time.monotonic() - t0) / interval)
        if ticks >= n:
            break
    rss, hwm = proc_status_kib(p.pid, "VmRSS"), proc_status_kib(p.pid, "VmHWM")
    at = time.monotonic() - t0
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    _, st, ru = os.wait4(p.pid, 0)
    err = p.stderr.read().decode(errors="replace")
    if err.strip():
        print(f"agent (rss run) logged:\n{err[-2000:]}", file=sys.stderr)
    total = log.ticks() if log else ticks
    cpu = ru.ru_utime + ru.ru_stime
    return {"approach": "gpu-otel-sidecar", "interval_s": interval, "ticks_at_read": ticks, "ticks_counted": bool(log),
            "seconds_at_read": round(at, 2), "rss_kib_at_read": rss, "hwm_kib_at_read": hwm, "ticks": total,
            "cpu_s": round(cpu, 4), "cpu_us_per_sample": round(cpu / max(total, 1) * 1e6, 1),
            "exit": os.waitstatus_to_exitcode(st)}


def first_export(binary, interval, export_ms, extra_env, limit_s=120):
    """Seconds from spawn to the "sampling started" log line and to the first export line."""
    env = agent_env(interval, extra_env, export_ms, log_level="info")
    t0 = time.monotonic()
    p = subprocess.Popen([binary, *AGENT_ARGS], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sel = selectors.DefaultSelector()
    sel.register(p.stdout, selectors.EVENT_READ, "out")
    sel.register(p.stderr, selectors.EVENT_READ, "err")
    started = exported = None
    buf = {"out": b"", "err": b""}
    while exported is None and time.monotonic() - t0 < limit_s and p.poll() is None:
        for key, _ in sel.select(timeout=0.05):
            chunk = os.read(key.fileobj.fileno(), 65536)
            now = time.monotonic() - t0
            buf[key.data] += chunk
            if key.data == "err" and started is None and b"sampling started" in buf["err"]:
                started = now
            if key.data == "out" and b"\n" in buf["out"]:
                exported = now
    p.send_signal(signal.SIGTERM)
    try:
        p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
    return {"sample_interval_s": interval, "export_interval_s": export_ms / 1000 if export_ms else None,
            "to_sampling_started_s": round(started, 3) if started is not None else None,
            "to_first_export_s": round(exported, 3) if exported is not None else None}


def pynvml(interval, seconds, time_v=False):
    with tempfile.NamedTemporaryFile("r", suffix=".txt") as out:
        wall, cpu, rss, code, _, how, _ = run_child([sys.executable, "-c", PYNVML_LOOP, str(interval), str(seconds), out.name],
                                                 dict(os.environ), seconds, stop_with_signal=False, time_v=time_v)
        ticks, calls_cpu = out.read().split()
    ticks, calls_cpu = int(ticks), float(calls_cpu)
    return {"approach": "pynvml loop", "interval_s": interval, "wall_s": round(wall, 2), "ticks": ticks,
            "cpu_s": round(cpu, 4), "cpu_us_per_sample": round(cpu / ticks * 1e6, 1), "peak_rss_kib": rss,
            "peak_rss_from": how, "nvml_calls_cpu_us_per_sample": round(calls_cpu / ticks * 1e6, 1), "exit": code}


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
            "peak_rss_kib": maxrss, "peak_rss_from": "wait4 ru_maxrss (at least this script's own)", "exit": 0}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agent", required=True)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--intervals", default="1,0.1", help="sample intervals in seconds, comma-separated")
    ap.add_argument("--nvml-lib", help="mock NVML library (agent only)")
    ap.add_argument("--scenario", help="NVML_MOCK_SCENARIO for the mock")
    ap.add_argument("--no-latency", action="store_true", help="NVML_MOCK_NO_LATENCY=1: drop the scenario's call latencies")
    ap.add_argument("--rss-ticks", type=int, default=10000, help="RSS after this many ticks (0: skip)")
    ap.add_argument("--rss-interval", type=float, help="sample interval of that run (default 0.001 with the mock, else 0.01)")
    ap.add_argument("--no-first-export", action="store_true", help="skip the time-to-first-export runs")
    ap.add_argument("--no-time-v", action="store_true", help="do not run the agent under /usr/bin/time -v")
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--agent-arg", action="append", default=[], help="an argument for the agent (repeatable), e.g. node")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="an environment variable for the agent (repeatable), e.g. GPU_SIDECAR_PROC_ROOT=/tmp/proc")
    a = ap.parse_args()
    AGENT_ARGS.extend(a.agent_arg)
    extra, mock = {}, None
    if a.nvml_lib:
        extra = {"GPU_SIDECAR_NVML_LIBRARY": os.path.abspath(a.nvml_lib), "NVML_MOCK_SCENARIO": os.path.abspath(a.scenario)}
        if a.no_latency:
            extra["NVML_MOCK_NO_LATENCY"] = "1"
        mock = mock_devices(a.scenario)
    extra.update(kv.split("=", 1) for kv in a.env)
    time_v = not a.no_time_v and os.access(TIME_V, os.X_OK)
    rows = []
    for interval in [float(x) for x in a.intervals.split(",")]:
        rows.append(agent(a.agent, interval, a.seconds, extra, mock, time_v))
        if not a.nvml_lib:
            try:
                rows.append(pynvml(interval, a.seconds, time_v))
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
        print(f"{r['approach']:24} {r['interval_s']:>8} {r['ticks']:>6}{'' if r.get('ticks_counted') else '*'} "
              f"{r['cpu_us_per_sample']:>13} {r['peak_rss_kib'] / 1024:>13.1f} {r.get('nvml_calls_cpu_us_per_sample', ''):>12}"
              + f"   RSS: {r['peak_rss_from']}")
    if not mock:
        print("* nominal tick count (wall / interval + 1)")
    for r in rows:
        if r.get("threads_steady"):
            total = sum(t["cpu_ms_per_s"] for t in r["threads_steady"].values())
            print(f"agent at {r['interval_s']} s, steady state (after {min(2.0, a.seconds / 4):g} s): {total:.2f} ms CPU per second: "
                  + ", ".join(f"{n} {t['cpu_ms_per_s']:.2f} ms/s ({t['wakeups_per_s']:g} wake-ups/s)"
                              for n, t in sorted(r["threads_steady"].items()) if t["cpu_ms_per_s"] or t["wakeups_per_s"]))
    rss = None
    if a.rss_ticks > 0:
        interval = a.rss_interval or (0.001 if mock else 0.01)
        rss = rss_after_ticks(a.agent, interval, a.rss_ticks, extra, mock)
        print(f"RSS after {rss['ticks_at_read']} ticks at {interval * 1000:g} ms ({rss['seconds_at_read']} s"
              f"{'' if mock else ', nominal count'}): VmRSS {rss['rss_kib_at_read'] / 1024:.1f} MiB, "
              f"VmHWM {rss['hwm_kib_at_read'] / 1024:.1f} MiB; whole run {rss['ticks']} ticks, "
              f"{rss['cpu_us_per_sample']} us CPU per tick")
    firsts = []
    if not a.no_first_export:
        for interval, export_ms in [(1.0, 1000), (None, None)]:
            f = first_export(a.agent, interval, export_ms, extra)
            firsts.append(f)
            print(f"first export (sample {interval or 'default 5'} s, export {export_ms / 1000 if export_ms else 'default 10'} s): "
                  f"sampling started {f['to_sampling_started_s']} s, first export line {f['to_first_export_s']} s after spawn")
    if a.out:
        json.dump({"binary_bytes": size, "rows": rows, "rss_after_ticks": rss, "first_export": firsts},
                  open(a.out, "w"), indent=2)


if __name__ == "__main__":
    main()
