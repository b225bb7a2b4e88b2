#!/usr/bin/env python3
"""Write the mock-NVML scenarios that exercise the agent's alert rules.

Usage: scripts/gen-rule-scenarios.py [OUTPUT_DIR]   (default: tests/scenarios)

Python 3 standard library only; deterministic (same bytes on every run). Each scenario is a
training job told in scenario seconds (run it with NVML_MOCK_TIME_SCALE to compress minutes
into seconds); its "description" says which alerts it must raise, and when. tests/rules.rs
checks them against the agent, with the phase times below.

  rule-leaking-job.json     memory loads, plateaus, then leaks 0.5 GiB/min from 300 s; the
                            job restarts at 1200 s (memory back to 20 GiB)
  rule-starving-job.json    a 1-minute dip (60-120 s), then starved 240-540 s, recovered,
                            then idle with no process from 900 s
  rule-imbalanced-pod.json  four GPUs; GPU 2 at 30 % while the others are at ~93 % from 120
                            to 600 s; from 840 s GPU 3's process exits
  rule-throttling-card.json power cap for 20 s (a blip), then 60-240 s; HW slowdown 300-480 s
  rule-overheating-card.json 88 C with SW thermal slowdown 120-420 s, one 86 C sample before
  rule-clean-run.json       two GPUs training for 25 minutes: loading, allocator sawtooth,
                            short power-cap blips, 80 C at most; must raise nothing
"""

import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIB = 1 << 30
MIB = 1 << 20
TOTAL = 80 * GIB


def device(i, rows):
    """An H100 80GB-like GPU `i` with these timeline rows."""
    return {
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-7e57a1e0-0000-4000-8000-00000000000%d" % i,
        "serial": "165000001000%d" % i,
        "pci_bus_id": "00000000:%02X:00.0" % (0x18 + 0x10 * i),
        "pci_device_id": 590352606,
        "pci_sub_system_id": 381751518,
        "vbios_version": "96.00.99.00.01",
        "minor_number": i,
        "brand": 14,
        "architecture": 9,
        "persistence_mode": True,
        "max_clocks_mhz": {"graphics": 1980, "sm": 1980, "mem": 2619, "video": 1755},
        "errors": {"nvmlDeviceGetFanSpeed": 2, "nvmlDeviceGetFanSpeed_v2": 2},
        "defaults": {
            "util_mem": 30,
            "util_enc": 0,
            "util_dec": 0,
            "mem_total": TOTAL,
            "mem_reserved": 0,
            "temp_gpu": 70,
            "temp_mem": 75,
            "power_mw": 450000,
            "power_limit_mw": 700000,
            "clock_graphics_mhz": 1980,
            "clock_sm_mhz": 1980,
            "clock_mem_mhz": 2619,
            "clocks_event_reasons": 0,
            "pstate": 0,
            "ecc_corrected": 0,
            "ecc_uncorrected": 0,
        },
        "timeline": rows,
    }


def scenario(description, devices):
    return {
        "description": description,
        "driver_version": "580.159.04",
        "loop": False,
        "devices": devices,
    }


def row(t, util, mem, pid=None, **extra):
    r = {"t": t, "util_gpu": util, "mem_used": int(mem)}
    r["processes"] = [] if pid is None else [[pid, int(mem)]]
    r.update(extra)
    return r


def jitter(t):
    """+-64 MiB, alternating every 5 s: the allocator's noise."""
    return 64 * MIB if (t // 5) % 2 == 0 else -64 * MIB


def leaking_job():
    rows = []
    for t in range(0, 1801, 5):
        if t < 30:
            mem = 20 * GIB * t / 30
        elif t < 1200:
            mem = 20 * GIB + jitter(t) + (0.5 * GIB * (t - 300) / 60 if t > 300 else 0)
        else:
            mem = 20 * GIB + jitter(t)
        rows.append(row(float(t), 95, max(mem, 256 * MIB), 4242))
    return scenario(
        "Rules: a leaking job. GPU 0 loads 20 GiB in 30 s, stays flat (+-64 MiB) until 300 s, "
        "then leaks 0.5 GiB/min (27.5 GiB at 1200 s); at 1200 s the job restarts (20 GiB). "
        "Expected: nvidia.gpu.alert.memory_leak fires after 900 s (10 min of rise), "
        "time to full ~ (80 GiB - used) / (0.5 GiB/min); resolves after 1200 s; nothing else.",
        [device(0, rows)],
    )


def starving_job():
    rows = []
    for t in range(0, 1301, 5):
        if 60 <= t < 120 or 240 <= t < 540:
            util = 10 if t < 120 else 12
        elif t >= 900:
            util = 0
        else:
            util = 90 + (t // 5) % 3
        pid = None if t >= 900 else 5150
        mem = 30 * GIB + jitter(t) if pid else 0
        rows.append(row(float(t), util, mem, pid, util_mem=5 if util < 20 else 35))
    return scenario(
        "Rules: a starving job. Busy (90-92 %) except a 1-minute dip to 10 % (60-120 s, too "
        "short) and 12 % from 240 to 540 s, with one process holding 30 GiB; from 900 s the "
        "job has ended (0 %, no process). Expected: nvidia.gpu.alert.input_starvation fires "
        "after 360 s, resolves after 660 s; nothing else.",
        [device(0, rows)],
    )


def imbalanced_pod():
    devices = []
    for i in range(4):
        rows = []
        for t in range(0, 1201, 10):
            util = 92 + i
            if i == 2 and 120 <= t < 600:
                util = 30
            pid = 6000 + i
            if i == 3 and t >= 840:
                util, pid = 0, None
            mem = 40 * GIB + jitter(t) if pid else 0
            rows.append(row(float(t), util, mem, pid))
        devices.append(device(i, rows))
    return scenario(
        "Rules: an imbalanced 4-GPU pod. GPUs at 92-95 % with one process each; GPU 2 at 30 % "
        "from 120 to 600 s; from 840 s GPU 3's process has exited (0 %, no memory). "
        "Expected: one nvidia.gpu.alert.utilization_imbalance with hw.id = GPU 2, fired after "
        "240 s, resolved after 720 s; no input_starvation (30 % is above 20 %); nothing else.",
        devices,
    )


def throttling_card():
    rows = []
    for t in range(0, 601, 5):
        reasons = 0
        power = 520000
        if t < 20 or 60 <= t < 240:
            reasons, power = 0x4, 699000
        elif 300 <= t < 480:
            reasons = 0x8
        rows.append(row(float(t), 97, 50 * GIB + jitter(t), 777,
                        clocks_event_reasons=reasons, power_mw=power,
                        clock_sm_mhz=1755 if reasons else 1980,
                        clock_graphics_mhz=1755 if reasons else 1980))
    return scenario(
        "Rules: a throttling card. SW power cap (bit 0x4, 699 W of 700 W) for 20 s at the start "
        "(too short) and from 60 to 240 s; HW slowdown (0x8) from 300 to 480 s. Expected: "
        "nvidia.gpu.alert.clocks_power_capped (info) fires after 90 s, resolves after 270 s; "
        "nvidia.gpu.alert.clocks_slowdown (warning) fires after 330 s, resolves after 510 s; "
        "nothing else.",
        [device(0, rows)],
    )


def overheating_card():
    rows = []
    for t in range(0, 601, 5):
        if t < 60:
            temp = 70 + t // 6
        elif t < 120:
            temp = 84
        elif t < 420:
            temp = 88
        else:
            temp = 75
        reasons = 0x20 if 180 <= t < 420 else 0
        rows.append(row(float(t), 96, 50 * GIB + jitter(t), 8080, temp_gpu=temp,
                        temp_mem=temp + 6, clocks_event_reasons=reasons,
                        clock_sm_mhz=1500 if reasons else 1980,
                        clock_graphics_mhz=1500 if reasons else 1980))
    # One hot sample alone before the heat: not three in a row.
    for r in rows:
        if r["t"] == 100.0:
            r["temp_gpu"] = 86
    return scenario(
        "Rules: an overheating card. 70 to 84 C in the first two minutes (one sample at 86 C at "
        "100 s), 88 C from 120 to 420 s with SW thermal slowdown (0x20) from 180 s, 75 C after. "
        "Expected: nvidia.gpu.alert.temperature_high fires on the third hot sample after 120 s "
        "and resolves three samples after 420 s; nvidia.gpu.alert.clocks_slowdown fires after "
        "210 s and resolves after 450 s; nothing else.",
        [device(0, rows)],
    )


def clean_run():
    devices = []
    for i in range(2):
        rows = []
        for t in range(0, 1501, 10):
            if t < 60:
                util = 5
                mem = 60 * GIB * min(t, 30) / 30
            else:
                util = 96 + (t // 10 + i) % 4
                # Allocator sawtooth: +1 GiB over a minute, then back.
                mem = 60 * GIB + GIB * ((t % 60) / 60)
            reasons = 0x4 if t % 120 == 0 and t >= 60 else 0
            rows.append(row(float(t), util, max(mem, 512 * MIB), 9000 + i,
                            temp_gpu=76 + (t // 10) % 5, clocks_event_reasons=reasons,
                            power_mw=699000 if reasons else 640000))
        devices.append(device(i, rows))
    return scenario(
        "Rules: a clean run. Two GPUs training for 25 minutes: loading for a minute (5 % busy, "
        "memory to 60 GiB), then 96-99 % busy, memory in a 1 GiB allocator sawtooth each "
        "minute, 76-80 C, SW power cap for 10 s every 2 minutes. Expected: no alert at all.",
        devices,
    )


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "tests", "scenarios")
    for name, build in [
        ("rule-leaking-job.json", leaking_job),
        ("rule-starving-job.json", starving_job),
        ("rule-imbalanced-pod.json", imbalanced_pod),
        ("rule-throttling-card.json", throttling_card),
        ("rule-overheating-card.json", overheating_card),
        ("rule-clean-run.json", clean_run),
    ]:
        s = build()
        with open(os.path.join(out, name), "w") as f:
            # One row per line: readable diffs, small files.
            f.write("{\n")
            keys = list(s.keys())
            for k in keys:
                if k != "devices":
                    f.write("  %s: %s,\n" % (json.dumps(k), json.dumps(s[k])))
            f.write('  "devices": [\n')
            for di, d in enumerate(s["devices"]):
                f.write("    {\n")
                for k, v in d.items():
                    if k == "timeline":
                        continue
                    f.write("      %s: %s,\n" % (json.dumps(k), json.dumps(v)))
                f.write('      "timeline": [\n')
                for ri, r in enumerate(d["timeline"]):
                    sep = "," if ri + 1 < len(d["timeline"]) else ""
                    f.write("        %s%s\n" % (json.dumps(r), sep))
                f.write("      ]\n")
                f.write("    }%s\n" % ("," if di + 1 < len(s["devices"]) else ""))
            f.write("  ]\n}\n")


if __name__ == "__main__":
    main()
