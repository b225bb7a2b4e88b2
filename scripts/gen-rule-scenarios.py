#!/usr/bin/env python3
"""Write the mock-NVML scenarios that exercise the agent's alert rules.

Usage: scripts/gen-rule-scenarios.py [OUTPUT_DIR]   (default: tests/scenarios)

Python 3 standard library only; deterministic (same bytes on every run). Each scenario is a
training job told in scenario seconds (run it with NVML_MOCK_TIME_SCALE to compress minutes
into seconds); its "description" says which alerts it must raise, and when. tests/rules/rules.rs
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
  rule-tensor-cores.json    three GPUs: fp32 for 10 minutes then bf16 (tensor_cores_idle
                            fires once, resolves after the switch); bf16 throughout with the
                            H200's figures (nothing); an A100 without GPM (nothing)
  rule-memory-bound.json    a copy loop (DRAM 92 %, SM 22 %) from 60 to 600 s, then bf16
                            training: memory_bound fires once and resolves; nothing else
  rule-preallocating-job.json two GPUs: a TensorFlow-style pool (97 % within 2 s of the
                            process appearing, flat for 10 minutes, then the process exits):
                            one memory_preallocated (info), no memory_near_full; a job that
                            grows to 96 %: memory_near_full as before
  report-efficiency.json    three GPUs for the run report's profiling figures (GPM means,
                            p95, tensor share of busy time, idle time holding memory, memory
                            patterns); see its description
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


# GPM values (percent) of the phases the profiling scenarios use. "bf16" is what the H200
# read under two bf16 jobs (SM activity 0.88, tensor 0.82, DRAM 0.17 at utilization 1.0).
FP32 = {"graphics_util": 99.0, "sm_util": 90.0, "sm_occupancy": 30.0, "any_tensor_util": 0.0,
        "hmma_tensor_util": 0.0, "fp32_util": 62.0, "dram_bw_util": 20.0,
        "pcie_tx_per_sec": 40.0, "pcie_rx_per_sec": 120.0}
BF16 = {"graphics_util": 99.0, "sm_util": 88.0, "sm_occupancy": 40.0, "any_tensor_util": 82.0,
        "hmma_tensor_util": 82.0, "fp32_util": 3.0, "dram_bw_util": 17.0,
        "pcie_tx_per_sec": 40.0, "pcie_rx_per_sec": 120.0}
COPY = {"graphics_util": 99.0, "sm_util": 22.0, "sm_occupancy": 10.0, "any_tensor_util": 0.0,
        "hmma_tensor_util": 0.0, "fp32_util": 1.0, "dram_bw_util": 92.0,
        "pcie_tx_per_sec": 40.0, "pcie_rx_per_sec": 120.0}
IDLE = {k: 0.0 for k in FP32}


def a100(i, rows):
    """An A100 (Ampere): no GPM (nvmlGpmQueryDeviceSupport answers not supported)."""
    d = device(i, rows)
    d["name"] = "NVIDIA A100-SXM4-80GB"
    d["architecture"] = 7
    d["gpm_supported"] = False
    return d


def tensor_cores():
    fp32_then_bf16, bf16, no_gpm = [], [], []
    for t in range(0, 1201, 5):
        mem = 40 * GIB + jitter(t)
        fp32_then_bf16.append(row(float(t), 98, mem, 7100, gpm=dict(FP32 if t < 600 else BF16)))
        bf16.append(row(float(t), 100, mem, 7101, gpm=dict(BF16)))
        no_gpm.append(row(float(t), 98, mem, 7102))
    return scenario(
        "Rules: tensor cores. GPU 0 runs an fp32 matmul job (utilization 98 %, tensor activity "
        "0, FP32 pipe 62 %) until 600 s, then the same job in bf16 (tensor 82 %). GPU 1 runs "
        "bf16 throughout with the H200's figures (SM 88 %, tensor 82 %, DRAM 17 %, busy 100 %). "
        "GPU 2 is an A100 without GPM running the fp32 job. Expected: one "
        "nvidia.gpu.alert.tensor_cores_idle for GPU 0, fired after 300 s (5 minutes), resolved "
        "after 900 s (5 minutes after the switch); nothing for GPU 1 or GPU 2; nothing else.",
        [device(0, fp32_then_bf16), device(1, bf16), a100(2, no_gpm)],
    )


def memory_bound():
    rows = []
    for t in range(0, 1001, 5):
        if t < 60:
            rows.append(row(float(t), 5, 30 * GIB * (t + 5) / 65, 7200, gpm=dict(IDLE)))
        elif t < 600:
            rows.append(row(float(t), 99, 30 * GIB + jitter(t), 7200, gpm=dict(COPY)))
        else:
            rows.append(row(float(t), 97, 30 * GIB + jitter(t), 7200, gpm=dict(BF16)))
    return scenario(
        "Rules: a memory-bound copy loop. Loading for a minute (5 % busy), then a device-to-"
        "device copy loop from 60 to 600 s (busy 99 %, DRAM bandwidth 92 % of peak, SM "
        "activity 22 %, no tensor math), then bf16 training. Expected: "
        "nvidia.gpu.alert.memory_bound fires after 360 s and resolves after 900 s; no "
        "tensor_cores_idle (the copy loop is the more specific diagnosis); nothing else.",
        [device(0, rows)],
    )


def preallocating_job():
    tf, growing = [], []
    for t in range(0, 721, 1):
        # TensorFlow-style: no process until 10 s; the process appears with its context
        # (0.5 GiB), 50 % one second later, 97 % the next; flat; it exits at 640 s.
        if t < 10 or t >= 640:
            tf.append(row(float(t), 0, 0))
        elif t == 10:
            tf.append(row(float(t), 3, 0.5 * GIB, 7300))
        elif t == 11:
            tf.append(row(float(t), 20, 0.50 * TOTAL, 7300))
        else:
            tf.append(row(float(t), 96, 0.97 * TOTAL, 7300))
        # Growing: 10 GiB at start, +10 GiB/min to 96 % (76.8 GiB) at ~400 s, then flat.
        mem = min(10 * GIB + 10 * GIB * t / 60, 0.96 * TOTAL)
        growing.append(row(float(t), 95, mem, 7301))
    for rows in (tf, growing):
        rows[:] = [r for r in rows if r["t"] % 5 == 0 or r["t"] in (10.0, 11.0, 12.0)]
    return scenario(
        "Rules: memory preallocation. GPU 0: a TensorFlow-style job whose process appears at "
        "10 s with its context (0.5 GiB), takes 50 % of the memory at 11 s and 97 % at 12 s, "
        "stays flat, and exits at 640 s. GPU 1: a job that starts with 10 GiB and grows 10 GiB "
        "per minute to 96 % (at ~400 s), then stays there. Expected: one "
        "nvidia.gpu.alert.memory_preallocated (info) for GPU 0, fired a minute after the jump "
        "and resolved when the process exits; no memory_near_full for GPU 0; "
        "nvidia.gpu.alert.memory_near_full for GPU 1 10 s after it reaches 95 % (~394 s); "
        "nothing else.",
        [device(0, tf), device(1, growing)],
    )


def report_efficiency():
    """Phases of 15 s (scenario time) after a 5 s lead-in; the lead-in and the tail hold the
    middle's mean values, so a run's time-weighted means equal the middle's whatever the
    exact start and stop (as long as the middle is covered whole)."""
    idle_held = dict(IDLE)
    phases = [(100, FP32), (100, BF16), (0, idle_held), (60, COPY)]
    keys = ["sm_util", "sm_occupancy", "any_tensor_util", "hmma_tensor_util", "dram_bw_util"]
    mean_util = sum(u for u, _ in phases) / len(phases)
    mean_gpm = {k: sum(g[k] for _, g in phases) / len(phases) for k in keys}
    rate = {"pcie_tx_per_sec": 40.0, "pcie_rx_per_sec": 120.0}

    def gpm(values):
        g = {k: values[k] for k in keys}
        g.update(rate)
        return g

    mean_row = gpm(mean_gpm)
    gpu0, gpu1, gpu2 = [], [], []
    gpu0.append(row(0.0, int(mean_util), 30 * GIB, 7400, gpm=mean_row))
    for k, (util, g) in enumerate(phases):
        gpu0.append(row(5.0 + 15 * k, util, 30 * GIB, 7400, gpm=gpm(g)))
    gpu0.append(row(65.0, int(mean_util), 30 * GIB, 7400, gpm=mean_row))
    for t in range(0, 121, 5):
        gpu1.append(row(float(t), 100, 10 * GIB + 0.5 * GIB * t, 7401))
    gpu2.append(row(0.0, 0, 0))
    gpu2.append(row(2.0, 3, 0.5 * GIB, 7402, gpm=gpm(BF16)))
    gpu2.append(row(3.0, 100, 0.97 * TOTAL, 7402, gpm=gpm(BF16)))
    gpu2[0]["gpm"] = gpm(BF16)
    return scenario(
        "Run report: profiling figures. Run at NVML_MOCK_TIME_SCALE=10 with GPM read every "
        "sample. GPU 0 (GPM): a 5 s lead-in, then 15 s each of fp32 (busy 100 %, SM 90 %, "
        "occupancy 30 %, tensor 0, DRAM 20 %), bf16 (100 %, 88 %, 40 %, 82 %, 17 %), idle while "
        "its process holds 30 GiB (0 %, GPM 0) and a copy loop (60 %, SM 22 %, 10 %, 0, DRAM "
        "92 %), then a tail; lead-in and tail hold the four phases' means (busy 65 %, SM 50 %, "
        "occupancy 20 %, tensor 20.5 %, DRAM 32.25 %), so the run's time-weighted means are "
        "those whatever the exact start and stop; the tensor cores' share of busy time is "
        "20.5 / 65; idle time holding memory is the 15 s idle phase. PCIe 40 / 120 MiB/s "
        "throughout. GPU 1: an A100 without GPM, busy 100 %, memory growing 0.5 GiB per "
        "second from 10 GiB (pattern growing; profiling figures null). GPU 2: a "
        "TensorFlow-style pool: its process appears at 2 s and holds 97 % from 3 s on, bf16 "
        "GPM values (pattern preallocated).",
        [device(0, gpu0), a100(1, gpu1), device(2, gpu2)],
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
        ("rule-tensor-cores.json", tensor_cores),
        ("rule-memory-bound.json", memory_bound),
        ("rule-preallocating-job.json", preallocating_job),
        ("report-efficiency.json", report_efficiency),
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
