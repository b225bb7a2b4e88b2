#!/usr/bin/env python3
"""Compares the agent's exports with nvidia-smi, from the folder that scripts/validate-on-gpu.sh
wrote (docs/validation.md).

  python3 scripts/compare-validation.py /tmp/gpu-validation

Reads agent-metrics.jsonl (one OTLP/JSON ExportMetricsServiceRequest per line, console
exporter), nvidia-smi.csv (--query-gpu ... -lms 1000, TZ=UTC), run.log, agent.log, load.log,
compute-apps.csv and bench.json. Pairs each agent export (the timeUnixNano of its points) with
the nvidia-smi row nearest in time and prints, as Markdown: one row per metric (pairs compared,
max and median absolute difference, verdict), idle and load means, the energy counter against
the mean power, the resource attributes, the exit code, what agent.log said, and the benchmark.
Exits 1 when a check fails. Standard library only.
"""
import csv, datetime, json, os, re, statistics, sys

MIB = 1024 * 1024
REASON_BITS = {  # nvmlClocksEventReasons
    "gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8,
    "sync_boost": 0x10, "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80, "display_clock_setting": 0x100,
}
GPU_POINT_KEYS = {"hw.id", "hw.type", "hw.vendor", "hw.model"}
MAX_PAIR_GAP_S = 0.75
# The --query-gpu list of scripts/validate-on-gpu.sh, in its order.
QUERY = ("timestamp,index,uuid,utilization.gpu,utilization.memory,memory.used,memory.free,memory.total,"
         "temperature.gpu,temperature.memory,power.draw,enforced.power.limit,clocks.gr,clocks.sm,clocks.mem,"
         "clocks_event_reasons.active,pstate,ecc.errors.corrected.volatile.total").split(",")
ALIASES = {"clocks.current.graphics": "clocks.gr", "clocks.current.sm": "clocks.sm", "clocks.current.memory": "clocks.mem"}


def attr_value(v):
    for k in ("stringValue", "intValue", "doubleValue", "boolValue"):
        if k in v:
            return v[k]
    return json.dumps(v)


def point_value(p):
    if "asDouble" in p:
        return float(p["asDouble"])
    if "asInt" in p:
        return int(p["asInt"])
    return None


def load_exports(path):
    """One dict per export: t (s), values {(name, attr-tuple): value}, gpu attrs, resource."""
    exports = []
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        d = json.loads(line)
        vals, times, gpu, resource, units, status, at = {}, [], {}, {}, {}, {}, {}
        for rm in d.get("resourceMetrics", []):
            resource = {a["key"]: attr_value(a["value"]) for a in rm.get("resource", {}).get("attributes", [])}
            for sm in rm.get("scopeMetrics", []):
                for m in sm.get("metrics", []):
                    kind = next((k for k in ("gauge", "sum", "histogram") if k in m), None)
                    if kind is None:
                        continue
                    units[m["name"]] = (m.get("unit", ""), kind, m[kind].get("isMonotonic"))
                    for p in m[kind].get("dataPoints", []):
                        attrs = {a["key"]: attr_value(a["value"]) for a in p.get("attributes", [])}
                        gpu.update({k: v for k, v in attrs.items() if k in GPU_POINT_KEYS})
                        if m["name"] == "hw.status":
                            status.update({k: v for k, v in attrs.items() if k not in GPU_POINT_KEYS and k != "hw.state"})
                        key = tuple(sorted((k, v) for k, v in attrs.items() if k not in GPU_POINT_KEYS
                                           and k in ("hw.gpu.task", "hw.sensor_location", "nvidia.gpu.clock.type",
                                                     "nvidia.gpu.clocks_event.reason", "error.type", "hw.state")))
                        vals[(m["name"], key)] = point_value(p)
                        at[(m["name"], key)] = int(p["timeUnixNano"]) / 1e9
                        times.append(int(p["timeUnixNano"]))
        if times:
            exports.append({"t": max(times) / 1e9, "values": vals, "gpu": gpu, "resource": resource,
                            "units": units, "status_attrs": status, "at": at})
    return exports


def get(e, name, **attrs):
    return e["values"].get((name, tuple(sorted(attrs.items()))))


def time_of(e, name, **attrs):
    """The point's own timeUnixNano, in seconds (the time of the tick that read it)."""
    return e["at"].get((name, tuple(sorted(attrs.items()))))


def num(s):
    s = (s or "").strip()
    if not s or "N/A" in s or "Not Supported" in s or s.startswith("["):
        return None
    if s.startswith("0x"):
        return int(s, 16)
    if s.startswith("P") and s[1:].isdigit():
        return int(s[1:])
    try:
        return float(s)
    except ValueError:
        return None


def load_smi(path):
    rows, header = [], None
    for rec in csv.reader(open(path)):
        rec = [c.strip() for c in rec]
        if not rec:
            continue
        if rec[0].startswith("timestamp"):
            header = [re.sub(r"\s*\[.*\]$", "", h) for h in rec]
            if len(header) == len(QUERY):  # nvidia-smi names some columns otherwise (clocks.gr -> clocks.current.graphics)
                header = list(QUERY)
            header = [ALIASES.get(h, h) for h in header]
            continue
        if header is None or len(rec) != len(header):
            continue
        try:
            t = datetime.datetime.strptime(rec[0], "%Y/%m/%d %H:%M:%S.%f").replace(
                tzinfo=datetime.timezone.utc).timestamp()
        except ValueError:
            continue
        r = {"t": t, "raw": dict(zip(header, rec))}
        r.update({h: num(v) for h, v in zip(header[1:], rec[1:])})
        rows.append(r)
    return rows


def nearest(rows, t):
    best = min(rows, key=lambda r: abs(r["t"] - t)) if rows else None
    if best is None or abs(best["t"] - t) > MAX_PAIR_GAP_S:
        return None
    return best


def agent_mask(e):
    mask, seen = 0, False
    for reason, bit in REASON_BITS.items():
        v = e["values"].get(("nvidia.gpu.clocks_event.active", (("nvidia.gpu.clocks_event.reason", reason),)))
        if v is not None:
            seen = True
            mask |= bit if v else 0
    return mask if seen else None


KNOWN_MASK = sum(REASON_BITS.values())

# (label, agent getter, smi getter, tolerance, unit shown, note)
CHECKS = [
    ("hw.gpu.utilization{general} x100 vs utilization.gpu", lambda e: _scale(get(e, "hw.gpu.utilization", **{"hw.gpu.task": "general"}), 100),
     lambda r: r.get("utilization.gpu"), 0.5, "%"),
    ("nvidia.gpu.memory_controller.utilization x100 vs utilization.memory", lambda e: _scale(get(e, "nvidia.gpu.memory_controller.utilization"), 100),
     lambda r: r.get("utilization.memory"), 0.5, "%"),
    ("hw.gpu.memory.usage vs memory.used", lambda e: _scale(get(e, "hw.gpu.memory.usage"), 1 / MIB),
     lambda r: r.get("memory.used"), 1.0, "MiB"),
    ("hw.gpu.memory.limit vs memory.total", lambda e: _scale(get(e, "hw.gpu.memory.limit"), 1 / MIB),
     lambda r: r.get("memory.total"), 1.0, "MiB"),
    ("nvidia.gpu.memory.reserved vs total-used-free", lambda e: _scale(get(e, "nvidia.gpu.memory.reserved"), 1 / MIB),
     lambda r: _sub(r.get("memory.total"), r.get("memory.used"), r.get("memory.free")), 2.0, "MiB"),
    ("hw.gpu.memory.utilization vs used/total", lambda e: get(e, "hw.gpu.memory.utilization"),
     lambda r: _div(r.get("memory.used"), r.get("memory.total")), 0.001, "1"),
    ("hw.temperature{gpu} vs temperature.gpu", lambda e: get(e, "hw.temperature", **{"hw.sensor_location": "gpu"}),
     lambda r: r.get("temperature.gpu"), 1.0, "Cel"),
    ("hw.temperature{memory} vs temperature.memory", lambda e: get(e, "hw.temperature", **{"hw.sensor_location": "memory"}),
     lambda r: r.get("temperature.memory"), 1.0, "Cel"),
    ("hw.power vs power.draw", lambda e: get(e, "hw.power"), lambda r: r.get("power.draw"), 15.0, "W"),
    ("nvidia.gpu.power.limit vs enforced.power.limit", lambda e: get(e, "nvidia.gpu.power.limit"),
     lambda r: r.get("enforced.power.limit"), 0.01, "W"),
    ("clock{sm} vs clocks.sm", lambda e: _scale(get(e, "nvidia.gpu.clock.frequency", **{"nvidia.gpu.clock.type": "sm"}), 1e-6),
     lambda r: r.get("clocks.sm"), 45.0, "MHz"),
    ("clock{graphics} vs clocks.gr", lambda e: _scale(get(e, "nvidia.gpu.clock.frequency", **{"nvidia.gpu.clock.type": "graphics"}), 1e-6),
     lambda r: r.get("clocks.gr"), 45.0, "MHz"),
    ("clock{memory} vs clocks.mem", lambda e: _scale(get(e, "nvidia.gpu.clock.frequency", **{"nvidia.gpu.clock.type": "memory"}), 1e-6),
     lambda r: r.get("clocks.mem"), 0.5, "MHz"),
    ("clocks_event.active (as mask) vs clocks_event_reasons.active", agent_mask,
     lambda r: None if r.get("clocks_event_reasons.active") is None else int(r["clocks_event_reasons.active"]) & KNOWN_MASK, 0, "mask"),
    ("performance_state vs pstate", lambda e: get(e, "nvidia.gpu.performance_state"), lambda r: r.get("pstate"), 0, "P"),
    ("hw.errors{corrected} vs ecc.errors.corrected.volatile.total", lambda e: get(e, "hw.errors", **{"error.type": "corrected"}),
     lambda r: r.get("ecc.errors.corrected.volatile.total"), 0, "{error}"),
]


def _scale(v, k):
    return None if v is None else v * k


def _div(a, b):
    return None if a is None or not b else a / b


def _sub(a, b, c):
    return None if None in (a, b, c) else a - b - c


def fmt(v, unit):
    if v is None:
        return "-"
    if unit == "mask":
        return hex(int(v))
    if isinstance(v, float) and abs(v) < 1 and v != 0:
        return f"{v:.4f}"
    return f"{v:.1f}" if isinstance(v, float) and v != int(v) else f"{int(v)}"


def compare(exports, smi, lag, ga, gs, tol, unit):
    """Differences between each export and the nvidia-smi row nearest to (export time + lag)."""
    out = []
    for e in exports:
        r = nearest(smi, e["t"] + lag)
        if r is None:
            continue
        a, s = ga(e), gs(r)
        if a is None or s is None:
            continue
        out.append(((0 if a == s else 1) if unit == "mask" else abs(a - s), e, r, a, s))
    return out


def summary(diffs, tol, unit):
    if not diffs:
        return "-", "-", "-", None
    xs = [x[0] for x in diffs]
    ok = sum(1 for x in xs if x <= tol)
    if unit == "mask":
        return f"{len(xs) - ok} differ", "-", f"{ok}/{len(xs)}", ok / len(xs)
    return f"{max(xs):.4g}", f"{statistics.median(xs):.4g}", f"{ok}/{len(xs)}", ok / len(xs)


def energy_starts(d):
    """The startTimeUnixNano of every hw.energy point in agent-metrics.jsonl."""
    out = []
    for line in open(os.path.join(d, "agent-metrics.jsonl")):
        if not line.startswith("{"):
            continue
        for rm in json.loads(line).get("resourceMetrics", []):
            for sm in rm.get("scopeMetrics", []):
                for m in sm.get("metrics", []):
                    if m["name"] == "hw.energy":
                        out += [p.get("startTimeUnixNano", 0) for p in m["sum"].get("dataPoints", [])]
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    exports = load_exports(os.path.join(d, "agent-metrics.jsonl"))
    smi = load_smi(os.path.join(d, "nvidia-smi.csv"))
    failed = []
    print(f"# Agent vs nvidia-smi ({d})\n")
    print(f"{len(exports)} agent exports, {len(smi)} nvidia-smi rows")
    if not exports or not smi:
        print("nothing to compare")
        sys.exit(1)
    t0 = exports[0]["t"]
    interval = statistics.median(b["t"] - a["t"] for a, b in zip(exports, exports[1:]))
    # Exports closer than half an interval to the one before: the shutdown path (final sample + flush).
    regular = [exports[0]] + [b for a, b in zip(exports, exports[1:]) if b["t"] - a["t"] >= interval / 2]
    extra = [e for e in exports if e not in regular]
    if extra:
        same = [e for e in extra if e["values"] == exports[exports.index(e) - 1]["values"]]
        print(f"{len(extra)} export(s) less than {interval / 2:.2f} s after the one before (shutdown); "
              f"{len(same)} of them identical in every value to the export before it")
    gaps = [abs(r["t"] - e["t"]) for e in exports for r in [nearest(smi, e["t"])] if r]
    print(f"export interval {interval:.3f} s; paired {len(gaps)} exports with an nvidia-smi row within "
          f"{MAX_PAIR_GAP_S} s (median gap {statistics.median(gaps) * 1000:.0f} ms)")
    print(f"agent span {exports[-1]['t'] - t0:.1f} s; nvidia-smi span {smi[-1]['t'] - smi[0]['t']:.1f} s; "
          f"first nvidia-smi row {smi[0]['t'] - t0:+.1f} s from the first export")

    # Which offset between the two series fits best: the agent stamps points at export time,
    # while the value comes from the sampler's latest snapshot.
    lags = [-2 * interval, -interval, 0.0, interval]
    fit = {}
    for lag in lags:
        bad = n = 0
        for label, ga, gs, tol, unit in CHECKS:
            if unit in ("MHz", "W", "%", "Cel"):
                diffs = compare(regular, smi, lag, ga, gs, tol, unit)
                n += len(diffs)
                bad += sum(1 for x in diffs if x[0] > tol)
        fit[lag] = (bad, n)
    best = min(lags, key=lambda l: (fit[l][0] / max(fit[l][1], 1), abs(l)))
    print("pairs outside tolerance (changing metrics: utilization, temperature, power, clocks) by offset of the "
          "nvidia-smi row from the export time: "
          + ", ".join(f"{l:+.1f} s: {fit[l][0]}/{fit[l][1]}" for l in lags) + f"; best fit {best:+.1f} s\n")

    print(f"| metric (agent vs nvidia-smi) | unit | tol | pairs | max abs diff (nearest row) | median | within tol (nearest row) "
          f"| max abs diff (row {best:+.0f} s) | within tol (row {best:+.0f} s) | verdict |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    details = []
    for label, ga, gs, tol, unit in CHECKS:
        d0 = compare(exports, smi, 0.0, ga, gs, tol, unit)
        db = compare(exports, smi, best, ga, gs, tol, unit)
        if not d0:
            print(f"| {label} | {unit} | {tol:g} | 0 | - | - | - | - | - | not compared (absent on one side) |")
            continue
        mx0, med0, ok0, share0 = summary(d0, tol, unit)
        mxb, _, okb, shareb = summary(db, tol, unit)
        share = max(share0, shareb or 0)
        verdict = "match" if share == 1 else ("match except transitions" if share >= 0.8 else "MISMATCH")
        if verdict == "MISMATCH":
            failed.append(label)
        print(f"| {label} | {unit} | {tol:g} | {len(d0)} | {mx0} | {med0} | {ok0} | {mxb} | {okb} | {verdict} |")
        for diff, e, r, a, sv in d0:
            if diff > tol:
                details.append(f"- {label}: export t={e['t'] - t0:5.2f} s agent {fmt(a, unit)} vs nvidia-smi {fmt(sv, unit)}"
                               f" (row {r['t'] - e['t']:+.2f} s)")

    # Energy: counter growth against mean power, over idle and load windows of regular exports,
    # each growth over the energy points' own times (the ticks that read the counter).
    print("\n## Energy counter against power\n")
    def energy(e):
        return get(e, "hw.energy")
    util = lambda e: get(e, "hw.gpu.utilization", **{"hw.gpu.task": "general"})
    segs = {"idle": [e for e in regular if util(e) is not None and util(e) <= 0.05],
            "load": [e for e in regular if util(e) is not None and util(e) >= 0.9]}
    print("| window (regular exports) | exports | seconds | hw.energy growth J | growth / s (W) | mean hw.power W "
          "| mean nvidia-smi power.draw W (same span) | growth/s vs nvidia-smi |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, seg in segs.items():
        seg = [e for e in seg if energy(e) is not None]
        if len(seg) < 3:
            print(f"| {name} | {len(seg)} | - | - | - | - | - | too few |")
            continue
        a, b = seg[0], seg[-1]
        dt = time_of(b, "hw.energy") - time_of(a, "hw.energy")
        de = energy(b) - energy(a)
        rate = de / dt
        pw = [get(e, "hw.power") for e in seg[1:] if get(e, "hw.power") is not None]
        sp = [r["power.draw"] for r in smi if a["t"] + best + interval / 2 < r["t"] <= b["t"] + best + interval / 2 and r.get("power.draw") is not None]
        mp = statistics.mean(pw) if pw else float("nan")
        ms = statistics.mean(sp) if sp else float("nan")
        rel = (rate - ms) / ms if sp else float("nan")
        print(f"| {name} | {len(seg)} | {dt:.1f} | {de:.1f} | {rate:.1f} | {mp:.1f} | {ms:.1f} | {rel * 100:+.2f} % |")
        if not abs(rel) <= 0.02:
            failed.append(f"energy rate ({name})")
    with_energy = [e for e in exports if energy(e) is not None]
    steps = [(energy(b) - energy(a), time_of(b, "hw.energy") - time_of(a, "hw.energy"))
             for a, b in zip(with_energy, with_energy[1:])]
    if steps:
        print(f"\nhw.energy in {len(with_energy)} of {len(exports)} exports (read at export ticks every "
              f"GPU_SIDECAR_ENERGY_INTERVAL, absent from the others); increments between consecutive points: "
              f"min {min(x for x, _ in steps):.1f} J, max {max(x for x, _ in steps):.1f} J, "
              f"{sum(1 for x, _ in steps if x == 0)} of {len(steps)} zero, {sum(1 for x, _ in steps if x < 0)} negative")
        if any(x < 0 for x, _ in steps):
            failed.append("hw.energy decreased")
        # The counter changes about every 100 ms: two reads half a second apart or more that
        # give the same value mean a value carried from an earlier read under a later time.
        if any(x == 0 and dt >= 0.5 for x, dt in steps):
            failed.append("hw.energy repeated (a carried value)")
    starts = {int(p_start) for p_start in energy_starts(d)}
    if len(starts) > 1:
        failed.append(f"hw.energy has {len(starts)} start times in a run without a reset")

    # Idle vs load: each side classified by its own utilization.
    print("\n## Idle and load means (each tool's rows classified by its own utilization: idle <= 5 %, load >= 90 %)\n")
    sm_idle = [r for r in smi if r.get("utilization.gpu") is not None and r["utilization.gpu"] <= 5]
    sm_load = [r for r in smi if r.get("utilization.gpu") is not None and r["utilization.gpu"] >= 90]
    print(f"agent: {len(segs['idle'])} idle / {len(segs['load'])} load exports; nvidia-smi: {len(sm_idle)} idle / {len(sm_load)} load rows\n")
    print("| metric | unit | idle agent | idle nvidia-smi | load agent | load nvidia-smi |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for label, ga, gs, tol, unit in CHECKS:
        cells = []
        for es, rs in ((segs["idle"], sm_idle), (segs["load"], sm_load)):
            av = [x for x in (ga(e) for e in es) if x is not None]
            sv = [x for x in (gs(r) for r in rs) if x is not None]
            if unit == "mask":
                cells += [",".join(sorted({hex(int(x)) for x in av})) or "-", ",".join(sorted({hex(int(x)) for x in sv})) or "-"]
            else:
                cells += [f"{statistics.mean(av):.4g}" if av else "-", f"{statistics.mean(sv):.4g}" if sv else "-"]
        print(f"| {label.split(' vs ')[0]} | {unit} | " + " | ".join(cells) + " |")

    extra_bits = sorted({hex(int(r["clocks_event_reasons.active"]) & ~KNOWN_MASK) for r in smi
                         if r.get("clocks_event_reasons.active") is not None and int(r["clocks_event_reasons.active"]) & ~KNOWN_MASK})
    print("\nnvidia-smi clock-event bits outside the agent's catalogue: " + (", ".join(extra_bits) if extra_bits else "none"))

    if details:
        print("\n## Pairs outside tolerance (nearest row)\n")
        print("\n".join(details[:60]))
        if len(details) > 60:
            print(f"- ... {len(details) - 60} more")

    # Resource and point attributes.
    print("\n## Resource and GPU attributes\n")
    res = exports[-1]["resource"]
    for k in sorted(res):
        print(f"- `{k}` = `{res[k]}`")
    want = {"k8s.pod.name": "validation-pod", "k8s.namespace.name": "validation", "k8s.container.name": "trainer",
            "service.name": "gpu-otel-sidecar"}
    for k, v in want.items():
        if res.get(k) != v:
            failed.append(f"resource {k}={res.get(k)!r}, want {v!r}")
    print(f"\nGPU point attributes: {exports[-1]['gpu']}")
    uuids = {r["raw"].get("uuid") for r in smi}
    if exports[-1]["gpu"].get("hw.id") not in uuids:
        failed.append(f"hw.id {exports[-1]['gpu'].get('hw.id')} not among nvidia-smi uuids {uuids}")
    status = exports[-1]["status_attrs"]
    print(f"hw.status static attributes: {status}")
    runlog_p = os.path.join(d, "run.log")
    runlog = open(runlog_p, errors="replace").read() if os.path.exists(runlog_p) else ""
    m = re.search(r"^driver_version, name, uuid, pci.bus_id, vbios_version, serial\n(.+)$", runlog, re.M)
    if m:
        drv, name, uuid, bus, vbios, serial = [x.strip() for x in m.group(1).split(",")]
        expect = {"hw.driver_version": drv, "hw.model": name, "hw.id": uuid, "nvidia.gpu.pci.bus_id": bus,
                  "hw.firmware_version": vbios, "hw.serial_number": serial}
        got = {**exports[-1]["gpu"], **status}
        wrong = {k: (got.get(k), v) for k, v in expect.items() if got.get(k) != v}
        print("static attributes against nvidia-smi (" + ", ".join(f"{k}={v}" for k, v in expect.items()) + "): "
              + ("all equal" if not wrong else f"DIFFER {wrong}"))
        if wrong:
            failed.append(f"static attributes {wrong}")
    print("\nMetrics and units seen: " + ", ".join(f"`{n}` ({u[0]}, {u[1]}{', monotonic' if u[2] else ''})"
                                               for n, u in sorted(exports[-1]["units"].items())))
    statuses = {dict(k[1]).get("hw.state", ""): v for k, v in exports[-1]["values"].items() if k[0] == "hw.status"}
    seen_states = sorted({dict(k[1]).get("hw.state") for e in exports for k, v in e["values"].items() if k[0] == "hw.status" and v == 1})
    print(f"\nhw.status at the last export: {statuses}; states at 1 during the run: {seen_states}")

    # Exit code, logs, load, processes.
    print("\n## Run\n")
    m = re.search(r"agent exit code: (\d+)", runlog)
    code = int(m.group(1)) if m else None
    print(f"- agent exit code after SIGTERM: {code}")
    if code != 0:
        failed.append(f"exit code {code}")
    for f in ("load.log", "compute-apps.csv"):
        p = os.path.join(d, f)
        if os.path.exists(p):
            print(f"- {f}: " + " / ".join(l.strip() for l in open(p, errors="replace") if l.strip()))
    p = os.path.join(d, "agent.log")
    if os.path.exists(p):
        lines = [l.rstrip() for l in open(p, errors="replace")]
        notable = [l for l in lines if re.search(r"\b(WARN|ERROR)\b|unsupported|not supported|NotSupported|failed", l, re.I)]
        print(f"- agent.log: {len(lines)} lines, {len(notable)} warnings/errors/unsupported" + (":" if notable else ""))
        for l in notable:
            print(f"  - `{l}`")

    # Benchmark.
    p = os.path.join(d, "bench.json")
    if os.path.exists(p):
        b = json.load(open(p))
        print(f"\n## Benchmark (binary {b['binary_bytes']} bytes, {b['binary_bytes'] / 1e6:.2f} MB)\n")
        print("| approach | interval s | wall s | samples | CPU s | CPU us/sample | peak RSS MiB | raw NVML calls us/sample | agent / raw NVML |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in b["rows"]:
            print(f"| {r['approach']} | {r['interval_s']} | {r['wall_s']} | {r['ticks']} | {r['cpu_s']} | {r['cpu_us_per_sample']} | "
                  f"{r['peak_rss_kib'] / 1024:.1f} | {r.get('nvml_calls_cpu_us_per_sample', '')} | {r.get('ratio_to_raw_nvml_calls', '')} |")
        # Two sample intervals of one approach: CPU = start-up + samples x per-sample cost.
        for appr in sorted({r["approach"] for r in b["rows"]}):
            rs = sorted((r for r in b["rows"] if r["approach"] == appr), key=lambda r: r["ticks"])
            if len(rs) == 2 and rs[1]["ticks"] > rs[0]["ticks"]:
                per = (rs[1]["cpu_s"] - rs[0]["cpu_s"]) / (rs[1]["ticks"] - rs[0]["ticks"])
                fixed = rs[0]["cpu_s"] - per * rs[0]["ticks"]
                print(f"\n{appr}: from the two intervals, CPU = {fixed * 1e3:.1f} ms fixed (start-up, shutdown) + "
                      f"{per * 1e6:.0f} us per sample (assuming {rs[0]['ticks']} and {rs[1]['ticks']} samples were taken)")

    print("\n## Verdict\n")
    print("all checks pass" if not failed else "FAILED: " + "; ".join(failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
