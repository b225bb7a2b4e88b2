#!/usr/bin/env python3
"""Convert the real H200 recording into a scenario for the mock NVML library.

Usage: scripts/convert-h200-fixture.py [FIXTURE_DIR] [OUTPUT]
  FIXTURE_DIR  default: tests/fixtures/nvml-h200
  OUTPUT       default: tests/scenarios/h200-under-load.json; "-" writes to stdout

Python 3 standard library only. The output is deterministic: running it again on the same
recording gives the same bytes. See tests/nvml-mock/README.md for the scenario format and
for which value comes from which file.
"""

import json
import os
import re
import sys
import xml.etree.ElementTree as ET

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_FIXTURE = os.path.join(REPO, "tests", "fixtures", "nvml-h200")
DEFAULT_OUTPUT = os.path.join(REPO, "tests", "scenarios", "h200-under-load.json")

NVML_BRAND_NVIDIA = 14
NVML_DEVICE_ARCH = {"Kepler": 2, "Maxwell": 3, "Pascal": 4, "Volta": 5, "Turing": 6,
                    "Ampere": 7, "Ada": 8, "Hopper": 9, "Blackwell": 10}
NVML_ERROR = {"InvalidArg": 2, "NotSupported": 3, "NoPermission": 4, "NotFound": 6,
              "GpuLost": 15, "Unknown": 999}
EVENT_BITS = {"SINGLE_BIT_ECC_ERROR": 0x1, "DOUBLE_BIT_ECC_ERROR": 0x2, "PSTATE_CHANGE": 0x4,
              "CRITICAL_XID_ERROR": 0x8, "CLOCK_CHANGE": 0x10, "POWER_SOURCE_CHANGE": 0x80,
              "MIG_CONFIG_CHANGE": 0x100}
# recording key -> (symbol, GPM metric name)
GPM_NAMES = {"GraphicsUtil": "graphics_util", "SmUtil": "sm_util", "SmOccupancy": "sm_occupancy",
             "AnyTensorUtil": "any_tensor_util", "HmmaTensorUtil": "hmma_tensor_util",
             "DramBwUtil": "dram_bw_util", "Fp32Util": "fp32_util", "Fp16Util": "fp16_util",
             "Fp64Util": "fp64_util", "PcieTxPerSec": "pcie_tx_per_sec",
             "PcieRxPerSec": "pcie_rx_per_sec"}
# recording key -> symbol whose latency it measured (only calls slower than ~0.1 ms matter)
LATENCY_KEYS = {"total_energy_mj": "nvmlDeviceGetTotalEnergyConsumption",
                "pcie_rx_kbps": "nvmlDeviceGetPcieThroughput",
                "max_clock_sm_mhz": "nvmlDeviceGetMaxClockInfo",
                "process_utilization": "nvmlDeviceGetProcessUtilization",
                "mig_mode": "nvmlDeviceGetMigMode"}


def ok(entry):
    """The `ok` answer of a calls-*.json entry (a Rust Debug string), or raise."""
    if "ok" not in entry:
        raise ValueError(f"expected an ok answer, got {entry!r}")
    return entry["ok"]


def ints(text):
    return [int(x) for x in re.findall(r"-?\d+", text)]


def mhz(text):
    return int(text.split()[0])


def watts_to_mw(text):
    return int(round(float(text.split()[0]) * 1000))


def dumps(value, indent=0, width=100, rows=False):
    """JSON with every object or array that fits in `width` columns on one line (so each
    timeline row is one line): readable and diffable."""
    flat = json.dumps(value)
    if rows:  # a timeline: one row per line
        pad = " " * (indent + 2)
        return "[\n" + ",\n".join(pad + json.dumps(r) for r in value) + "\n" + " " * indent + "]"
    if not isinstance(value, (dict, list)) or indent + len(flat) <= width or not value:
        return flat
    pad = " " * (indent + 2)
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(k)}: "
                 + (dumps(v, indent + 2, 10**6 if k == "timeline" else width, k == "timeline"))
                 for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + dumps(v, indent + 2, width) for v in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def main(argv):
    fixture = argv[1] if len(argv) > 1 else DEFAULT_FIXTURE
    output = argv[2] if len(argv) > 2 else DEFAULT_OUTPUT

    with open(os.path.join(fixture, "calls-under-load.json")) as f:
        calls = json.load(f)
    gpu_xml = ET.parse(os.path.join(fixture, "nvidia-smi-q-idle.xml")).getroot()
    gpu = gpu_xml.find("gpu")
    with open(os.path.join(fixture, "series-under-load.jsonl")) as f:
        series = [json.loads(line) for line in f if line.strip()]

    d = calls["devices"][0]
    assert calls["count"] == 1, "the recording holds one GPU"

    # --- static facts
    name = json.loads(ok(d["name"]))
    uuid = json.loads(ok(d["uuid"]))
    serial = json.loads(ok(d["serial"]))
    assert name == gpu.findtext("product_name")
    assert uuid == gpu.findtext("uuid") and serial == gpu.findtext("serial")
    pci = gpu.find("pci")
    bus_id = pci.findtext("pci_bus_id")
    assert f'bus_id: "{bus_id}"' in ok(d["pci_info"])
    driver = json.loads(calls["driver"][len("Ok("):-1])
    assert driver == gpu_xml.findtext("driver_version")
    nvml_version = json.loads(calls["nvml"][len("Ok("):-1])
    cuda = ints(calls["cuda"])[0]
    total, used_v2, free, reserved, version = ints(ok(d["memory_info"]))
    assert version == 0x02000028
    max_clocks = gpu.find("max_clocks")
    mig_current, mig_pending = ints(ok(d["mig_mode"]))
    events = 0
    for flag in re.findall(r"[A-Z_]+", calls["devices"][0]["supported_event_types"]):
        events |= EVENT_BITS.get(flag, 0)
    enc = ints(ok(d["encoder_utilization"]))
    dec = ints(ok(d["decoder_utilization"]))
    assert enc[1] == dec[1], "one sampling period for encoder and decoder"

    errors = {}
    fan = d["fan_speed_0"]
    if "err" in fan:
        errors["nvmlDeviceGetFanSpeed"] = NVML_ERROR[fan["err"]]
        errors["nvmlDeviceGetFanSpeed_v2"] = NVML_ERROR[fan["err"]]

    latency = {}
    for key, sym in LATENCY_KEYS.items():
        latency[sym] = int(round(d[key]["median_us"]))
    latency["nvmlGpmMetricsGet"] = int(round(d["gpm"]["metrics_get_us"]))
    latency["nvmlGpmSampleGet"] = int(round(d["gpm"]["sample_us"]))

    pu = ints(ok(d["process_utilization"]))  # [(pid, sm %, mem %)]
    process_util = [[pu[i], pu[i + 1], pu[i + 2], 0, 0] for i in range(0, len(pu), 3)]

    remap = gpu.find("remapped_rows")
    remapped = [int(remap.findtext("remapped_row_corr")), int(remap.findtext("remapped_row_unc")),
                1 if remap.findtext("remapped_row_pending") == "Yes" else 0,
                1 if remap.findtext("remapped_row_failure") == "Yes" else 0]
    agg = gpu.find("ecc_errors/aggregate")
    agg_corr = int(agg.findtext("sram_correctable")) + int(agg.findtext("dram_correctable"))
    agg_unc = (int(agg.findtext("sram_uncorrectable_parity"))
               + int(agg.findtext("sram_uncorrectable_secded"))
               + int(agg.findtext("dram_uncorrectable")))

    defaults = {
        "mem_reserved": reserved,
        "power_limit_mw": int(ok(d["enforced_power_limit_mw"])),
        "power_mgmt_limit_mw": watts_to_mw(gpu.findtext("gpu_power_readings/current_power_limit")),
        "util_enc": enc[0],
        "util_dec": dec[0],
        "ecc_corrected": int(ok(d["ecc_volatile_corrected"])),
        "ecc_uncorrected": int(ok(d["ecc_volatile_uncorrected"])),
        "ecc_corrected_aggregate": agg_corr,
        "ecc_uncorrected_aggregate": agg_unc,
        "pcie_tx_kbps": int(ok(d["pcie_tx_kbps"])),
        "pcie_rx_kbps": int(ok(d["pcie_rx_kbps"])),
        "remapped_rows": remapped,
        "process_util": process_util,
        "gpm": {GPM_NAMES[k]: v for k, v in d["gpm"]["values"]},
    }

    # --- timeline: one row per series line
    timeline = []
    for s in series:
        row = {
            "t": s["t"],
            "util_gpu": s["util"][0],
            "util_mem": s["util"][1],
            "mem_total": s["mem"][0],
            "mem_used": s["mem"][1],
            "mem_free": s["mem"][2],
            "temp_gpu": s["temp"],
            "temp_mem": s["mem_temp"][1] if s["mem_temp"][0] == 0 else None,
            "power_mw": s["power_mw"],
            "energy_mj": s["energy_mj"],
            "clock_graphics_mhz": s.get("graphics_mhz", s["sm_mhz"]),
            "clock_sm_mhz": s["sm_mhz"],
            "clock_mem_mhz": s["mem_mhz"],
            "clocks_event_reasons": s["throttle"],
            "pstate": s["pstate"],
            "processes": s["procs"],
        }
        timeline.append(row)

    # the series' used includes the reserved memory (total - free): check against memory_info
    first = series[0]
    assert first["mem"][0] == total and first["mem"][2] == free
    assert first["mem"][1] - reserved == used_v2, "series used = v2 used + reserved"

    scenario = {
        "description": "Converted by scripts/convert-h200-fixture.py from the real H200 "
                       "recording (tests/fixtures/nvml-h200): calls-under-load.json, "
                       "series-under-load.jsonl (118 rows, 30 s), nvidia-smi-q-idle.xml.",
        "driver_version": driver,
        "nvml_version": nvml_version,
        "cuda_driver_version": cuda,
        "init_error": None,
        "loop": True,
        "devices": [{
            "name": name,
            "uuid": uuid,
            "serial": serial,
            "pci_bus_id": bus_id,
            "pci_device_id": int(pci.findtext("pci_device_id"), 16),
            "pci_sub_system_id": int(pci.findtext("pci_sub_system_id"), 16),
            "vbios_version": gpu.findtext("vbios_version"),
            "minor_number": int(ok(d["minor_number"])),
            "brand": NVML_BRAND_NVIDIA if gpu.findtext("product_brand") == "NVIDIA" else None,
            "architecture": NVML_DEVICE_ARCH[gpu.findtext("product_architecture")],
            "persistence_mode": ok(d["persistence_mode"]) == "true",
            "max_clocks_mhz": {
                "graphics": mhz(max_clocks.findtext("graphics_clock")),
                "sm": int(ok(d["max_clock_sm_mhz"])),
                "mem": mhz(max_clocks.findtext("mem_clock")),
                "video": mhz(max_clocks.findtext("video_clock")),
            },
            "supported_event_types": events,
            "gpm_supported": ok(d["gpm_support"]) == "true",
            "codec_sampling_period_us": enc[1],
            "mig": {"current": mig_current, "pending": mig_pending},
            "errors": errors,
            "latency_us": latency,
            "defaults": defaults,
            "timeline": timeline,
        }],
        "faults": [],
        "events": [],
    }

    text = dumps(scenario) + "\n"
    if output == "-":
        sys.stdout.write(text)
    else:
        with open(output, "w") as f:
            f.write(text)
        print(f"wrote {output}: {len(timeline)} rows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
