#!/usr/bin/env python3
"""Write the mock-NVML scenarios of older drivers: each one's newer NVML call is missing or
refused while the older version answers (the agent's versioned-call fallbacks,
src/sampling/raw.rs `Versioned`).

Usage: scripts/gen-fallback-scenarios.py [OUTPUT_DIR]   (default: tests/scenarios)

Python 3 standard library only; deterministic. tests/agent/old_drivers.rs runs the agent on each
(with tests/scenarios/memory-v2-missing.json, the case as it was reported).

  fallback-memory-info.json      GPU 0: nvmlDeviceGetMemoryInfo_v2 NOT_SUPPORTED (WSL);
                                 GPU 1: UNKNOWN (R470); GPU 2: v2 answers (reserved 512 MiB)
  fallback-processes.json        GPU 0: ..._v3 FUNCTION_NOT_FOUND, _v2 answers;
                                 GPU 1: _v3 and _v2 FUNCTION_NOT_FOUND, v1 answers
  fallback-clocks-reasons.json   nvmlDeviceGetCurrentClocksEventReasons FUNCTION_NOT_FOUND
                                 (before R535), ...ThrottleReasons answers sw_power_cap
  fallback-pci-info.json         GPU 0: nvmlDeviceGetPciInfo_v3 FUNCTION_NOT_FOUND, _v2
                                 answers; GPU 1: _v3 and _v2 refused, v1 answers
  fallback-event-wait.json       nvmlEventSetWait_v2 FUNCTION_NOT_FOUND (before R450),
                                 nvmlEventSetWait answers; XID 79 at 1 s, XID 13 at 2 s
  fallback-mps-processes.json    MPS clients on both GPUs; GPU 0: ..._v3 FUNCTION_NOT_FOUND
                                 (_v2 answers); GPU 1: _v3 and _v2 refused (v1 answers)
"""

import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIB = 1 << 30
MIB = 1 << 20
FUNCTION_NOT_FOUND = 13
NOT_SUPPORTED = 3
UNKNOWN = 999


def device(i, errors=None, **row):
    """A Tesla T4-like GPU `i` (no GPM), as the reported case; `errors` by symbol."""
    defaults = {
        "util_gpu": 10 * (i + 1),
        "util_mem": 5,
        "util_enc": 0,
        "util_dec": 0,
        "mem_total": 15 * GIB,
        "mem_reserved": 512 * MIB,
        "mem_used": (i + 4) * GIB,
        "temp_gpu": 40 + i,
        "temp_mem": 50,
        "power_mw": 70000,
        "power_limit_mw": 70000,
        "clock_graphics_mhz": 1590,
        "clock_sm_mhz": 1590,
        "clock_mem_mhz": 5000,
        "clock_video_mhz": 1470,
        "clocks_event_reasons": 0,
        "pstate": 0,
        "ecc_corrected": 0,
        "ecc_uncorrected": 0,
        "ecc_corrected_aggregate": 0,
        "ecc_uncorrected_aggregate": 0,
        "processes": [[2000 + i, (i + 1) * 512 * MIB]],
        "process_util": [[2000 + i, 10, 5, 0, 0]],
        "pcie_tx_kbps": 1000,
        "pcie_rx_kbps": 2000,
        "remapped_rows": [0, 0, 0, 0],
    }
    defaults.update(row)
    errs = {"nvmlDeviceGetFanSpeed": 2, "nvmlDeviceGetFanSpeed_v2": 2}
    errs.update(errors or {})
    return {
        "name": "Tesla T4",
        "uuid": "GPU-01d0d000-0000-4000-8000-00000000000%d" % i,
        "serial": "132000000000%d" % i,
        "pci_bus_id": "00000000:%02X:00.0" % (0x18 + 0x10 * i),
        "pci_device_id": 506991838,
        "pci_sub_system_id": 305139934,
        "vbios_version": "90.04.96.00.02",
        "minor_number": i,
        "brand": 2,
        "architecture": 6,
        "persistence_mode": True,
        "max_clocks_mhz": {"graphics": 1590, "sm": 1590, "mem": 5001, "video": 1470},
        "errors": errs,
        "defaults": defaults,
        "timeline": [
            {"t": 0.0, "energy_mj": 1000000},
            {"t": 1.0, "energy_mj": 1070000},
        ],
    }


def scenario(description, devices, events=(), faults=()):
    return {
        "description": description,
        "driver_version": "470.256.02",
        "nvml_version": "11.470.256.02",
        "cuda_driver_version": 11040,
        "init_error": None,
        "loop": True,
        "devices": devices,
        "faults": list(faults),
        "events": list(events),
    }


SCENARIOS = {
    "fallback-memory-info.json": scenario(
        "Memory through nvmlDeviceGetMemoryInfo (v1) where _v2 is refused: GPU 0 answers "
        "NOT_SUPPORTED for _v2 (as under WSL), GPU 1 UNKNOWN (as some R470 setups), GPU 2 "
        "answers _v2 (reserved 512 MiB). v1 used = mem_used (reserved included), v2 used = "
        "mem_used - 512 MiB.",
        [
            device(0, {"nvmlDeviceGetMemoryInfo_v2": NOT_SUPPORTED}),
            device(1, {"nvmlDeviceGetMemoryInfo_v2": UNKNOWN}),
            device(2),
        ],
    ),
    "fallback-processes.json": scenario(
        "Compute processes through older versions: GPU 0's "
        "nvmlDeviceGetComputeRunningProcesses_v3 answers FUNCTION_NOT_FOUND (R470: _v2 "
        "answers); GPU 1's _v3 and _v2 both answer FUNCTION_NOT_FOUND (v1 answers).",
        [
            device(0, {"nvmlDeviceGetComputeRunningProcesses_v3": FUNCTION_NOT_FOUND}),
            device(
                1,
                {
                    "nvmlDeviceGetComputeRunningProcesses_v3": FUNCTION_NOT_FOUND,
                    "nvmlDeviceGetComputeRunningProcesses_v2": FUNCTION_NOT_FOUND,
                },
            ),
        ],
    ),
    "fallback-clocks-reasons.json": scenario(
        "nvmlDeviceGetCurrentClocksEventReasons answers FUNCTION_NOT_FOUND (drivers before "
        "R535); nvmlDeviceGetCurrentClocksThrottleReasons answers 4 (sw_power_cap).",
        [
            device(
                0,
                {"nvmlDeviceGetCurrentClocksEventReasons": FUNCTION_NOT_FOUND},
                clocks_event_reasons=4,
            )
        ],
    ),
    "fallback-pci-info.json": scenario(
        "PCI bus id through older versions: GPU 0's nvmlDeviceGetPciInfo_v3 answers "
        "FUNCTION_NOT_FOUND (_v2 answers); GPU 1's _v3 and _v2 answer NOT_SUPPORTED (v1 "
        "answers). The older versions fill only busIdLegacy (4-digit domain).",
        [
            device(0, {"nvmlDeviceGetPciInfo_v3": FUNCTION_NOT_FOUND}),
            device(
                1,
                {
                    "nvmlDeviceGetPciInfo_v3": NOT_SUPPORTED,
                    "nvmlDeviceGetPciInfo_v2": NOT_SUPPORTED,
                },
            ),
        ],
    ),
    "fallback-event-wait.json": scenario(
        "nvmlEventSetWait_v2 answers FUNCTION_NOT_FOUND (drivers before R450); "
        "nvmlEventSetWait (v1, no instance ids) delivers XID 79 at 1 s and XID 13 at 2 s.",
        [device(0)],
        events=[
            {"t": 1.0, "device": 0, "type": "xid", "data": 79},
            {"t": 2.0, "device": 0, "type": "xid", "data": 13},
        ],
        faults=[{"call": "nvmlEventSetWait_v2", "code": FUNCTION_NOT_FOUND}],
    ),
    "fallback-mps-processes.json": scenario(
        "MPS clients through older versions: both GPUs run MPS clients; GPU 0's "
        "nvmlDeviceGetMPSComputeRunningProcesses_v3 answers FUNCTION_NOT_FOUND (_v2 answers), "
        "GPU 1's _v3 and _v2 answer FUNCTION_NOT_FOUND (v1 answers).",
        [
            device(
                0,
                {"nvmlDeviceGetMPSComputeRunningProcesses_v3": FUNCTION_NOT_FOUND},
                mps_processes=[[3000, 256 * MIB]],
            ),
            device(
                1,
                {
                    "nvmlDeviceGetMPSComputeRunningProcesses_v3": FUNCTION_NOT_FOUND,
                    "nvmlDeviceGetMPSComputeRunningProcesses_v2": FUNCTION_NOT_FOUND,
                },
                mps_processes=[[3001, 256 * MIB]],
            ),
        ],
    ),
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "tests", "scenarios")
    for name, s in SCENARIOS.items():
        with open(os.path.join(out, name), "w") as f:
            json.dump(s, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
