//! `docs/metrics.md`, generated from the tables ([`markdown`]).

use super::{
    AgentMetricDef, MetricDef, CATALOGUE, COMMON_ATTRIBUTES, POD_ATTRIBUTES, POD_CATALOGUE,
    RECORDED, SELF_METRICS,
};

/// The most series one GPU's default export may carry (data points: one per metric and
/// attribute set, a histogram counting once): dcgm-exporter's default field list is about 21
/// per GPU, and managed Prometheus services bill per active series.
pub const SERIES_BUDGET: usize = 40;

/// Series in the default export of the real H200 recording
/// (`tests/scenarios/h200-under-load.json`: one GPU, one process, the SW power cap on),
/// measured by `tests/agent/e2e.rs` (`h200_default_export_stays_within_the_series_budget`, which
/// fails when this is not the count it measures).
pub const H200_DEFAULT_SERIES: usize = 38;

/// The same with `GPU_SIDECAR_METRICS_DETAIL=true`, measured by the same test.
pub const H200_DETAIL_SERIES: usize = 55;
use crate::sampling::bounds::{self, Reading};
use crate::sampling::SampleGroup;

/// The metrics each reading's bounds ([`bounds::BOUNDS`]) hold: a value outside them is
/// dropped by the sampler, so none of these metrics carries it. Rendered as "Valid ranges"
/// in `docs/metrics.md`; a test checks every reading and every metric above is here.
pub static VALID_RANGES: &[(Reading, &[&str])] = &[
    (Reading::UtilizationGpu, &["hw.gpu.utilization"]),
    (
        Reading::UtilizationMemoryController,
        &["nvidia.gpu.memory_controller.utilization"],
    ),
    (Reading::UtilizationEncoder, &["hw.gpu.utilization"]),
    (Reading::UtilizationDecoder, &["hw.gpu.utilization"]),
    (
        Reading::MemoryTotal,
        &["hw.gpu.memory.limit", "hw.gpu.memory.utilization"],
    ),
    (
        Reading::MemoryPart,
        &[
            "hw.gpu.memory.usage",
            "hw.gpu.memory.utilization",
            "nvidia.gpu.memory.reserved",
        ],
    ),
    (Reading::TemperatureGpu, &["hw.temperature"]),
    (Reading::TemperatureMemory, &["hw.temperature"]),
    (Reading::Power, &["hw.power"]),
    (Reading::PowerLimit, &["nvidia.gpu.power.limit"]),
    (Reading::Energy, &["hw.energy"]),
    (Reading::Clock, &["nvidia.gpu.clock.frequency"]),
    (
        Reading::ClocksEventReasons,
        &["nvidia.gpu.clocks_event.active", "hw.status"],
    ),
    (Reading::PerformanceState, &["nvidia.gpu.performance_state"]),
    (Reading::EccErrors, &["hw.errors"]),
    (
        Reading::RemappedRows,
        &["nvidia.gpu.memory.remapped_rows", "hw.status"],
    ),
    (Reading::ProcessMemory, &["nvidia.gpu.process.memory.usage"]),
    (
        Reading::ProcessUtilization,
        &[
            "nvidia.gpu.process.utilization",
            "nvidia.gpu.process.memory_controller.utilization",
        ],
    ),
    (
        Reading::GpmActivity,
        &[
            "nvidia.gpu.graphics_engine.activity",
            "nvidia.gpu.sm.activity",
            "nvidia.gpu.sm.occupancy",
            "nvidia.gpu.tensor.activity",
            "nvidia.gpu.pipe.activity",
            "nvidia.gpu.dram.activity",
        ],
    ),
    (Reading::GpmPcie, &["hw.gpu.io"]),
    (Reading::GpmNvlink, &["nvidia.gpu.nvlink.io"]),
    (Reading::PcieThroughput, &["hw.gpu.io"]),
];

/// How old a value of `group` can be when exported, and how often it is in an export.
pub fn age(group: SampleGroup) -> &'static str {
    match group {
        SampleGroup::Static | SampleGroup::Fast => {
            "read at every tick; in every export, read by the tick it is exported with"
        }
        SampleGroup::Energy => {
            "read at the export tick it is exported with, every `GPU_SIDECAR_ENERGY_INTERVAL` (rounded to whole exports; at every export when shorter); absent from the other exports"
        }
        SampleGroup::Process => {
            "read at the export tick it is exported with, every `GPU_SIDECAR_PROCESS_INTERVAL` (rounded to whole exports; at every export when shorter); the mean over the window since the previous read"
        }
        SampleGroup::Gpm => {
            "read at the export tick it is exported with, every `GPU_SIDECAR_GPM_INTERVAL` (rounded to whole exports; at every export when shorter); the mean over the window since the previous GPM sample"
        }
        SampleGroup::Pcie => {
            "updated when a GPM window ends (`GPU_SIDECAR_GPM_INTERVAL`) or, on GPUs without GPM PCIe counters, at a PCIe throughput read (`GPU_SIDECAR_PCIE_INTERVAL`), at export ticks; in the export of that tick only"
        }
    }
}

/// `docs/metrics.md`, generated from [`CATALOGUE`].
pub fn markdown() -> String {
    let mut s = String::from(
        "# Metrics\n\n\
         Generated from `src/catalogue/metrics/` (the test `metrics_doc_matches_catalogue` fails when \
         this file and the code disagree; regenerate with `UPDATE_DOCS=1 cargo test --test metrics_doc`).\n\n\
         Ratios are 0..1, units are UCUM. A value NVML does not give is absent, never 0 (a kind of a \
         folded breakdown that has been 0 since the agent started is absent too, until it is not: \
         [Series budget](#series-budget)).\n\n",
    );
    s.push_str(&format!(
        "Every GPU data point carries {COMMON_ATTRIBUTES}.\n\n"
    ));
    s.push_str(
        "## Time\n\n\
         One rule for every metric: **an exported point's time is within one sample tick of when NVML \
         produced its value.** Each GPU data point's `time_unix_nano` is the start of the sample tick \
         that read its value, and the export follows that tick at once (the sampler marks the ticks that \
         are exported: one every `OTEL_METRIC_EXPORT_INTERVAL`). A value not read at an exported tick is \
         not in that export: nothing is carried from an earlier read under a later time. The fast group \
         is read at every tick; each slow group (energy, per-process utilization, GPM, PCIe throughput) at \
         export ticks, every N-th export for an interval of N exports (column *age*), and when its \
         interval is shorter than the export interval also at its own cadence between exports (those \
         reads reach the rules and the run report, not the exporter); the final sample at shutdown \
         reads every group. Reading a tick takes under 1 ms per GPU for the fast group; the \
         energy counter costs ~4 ms of CPU per GPU on an H200 (which is why it has its own interval).\n\n\
         **Start times.** A counter (sum) read from a total counts from the agent's first reading of \
         that series: its first point has that reading's time as start time and the value 0 (NVML's \
         energy and ECC totals count since the driver loaded; that past is not claimed). When NVML's \
         total goes down (driver reload, GPU reset), the series starts again: start time = the previous \
         reading's time, counting from 0. When the wall clock steps by more than 1 s against the \
         monotonic clock (NTP correcting the node), every series starts again at the next point (start \
         time = its time, value 0). Both are logged once. No point ends before it starts, and no sum goes \
         down under one start time. An up-down counter's start time is when the agent first saw it. \
         Gauges carry no start time. Elapsed times (GPM and PCIe windows, the run report) come from the \
         monotonic clock. Sums and the histogram are cumulative unless \
         `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE` asks for delta (a delta point covers the time \
         since the last point the collector accepted).\n\n",
    );
    s.push_str("| name | instrument | unit | attributes | NVML source | age | description |\n");
    s.push_str("| --- | --- | --- | --- | --- | --- | --- |\n");
    let cell = |t: &str| t.replace('|', "\\|");
    for d in CATALOGUE {
        s.push_str(&metric_row(d));
    }
    s.push_str(&format!(
        "\n## Series budget\n\n\
         Nothing is sent that carries no information: the default export of one GPU carries at most \
         {SERIES_BUDGET} series (a series is a metric and one set of attributes: one data point per \
         export; a histogram counts once). The real H200 recording's default export (one GPU, one \
         process, `tests/scenarios/h200-under-load.json`) carries **{H200_DEFAULT_SERIES}**, measured by \
         `tests/agent/e2e.rs` (`h200_default_export_stays_within_the_series_budget`) on every export of a run \
         and on all of them together; with `GPU_SIDECAR_METRICS_DETAIL=true`, {H200_DETAIL_SERIES}. What \
         the default leaves out until it says something, or folds:\n\n\
         - Counters of events (`nvidia.gpu.alerts`, `nvidia.gpu.xid.errors`, \
         `gpu_sidecar.export.failures`, `gpu_sidecar.events.dropped`, `gpu_sidecar.nvml.*`) are born \
         with their first event, at 1 with the agent's start as start time, never exported at 0 \
         (see [events.md](events.md#first-occurrences)).\n\
         - Breakdowns by kind (the clock-event reasons, the non-tensor pipes, a process's encoder and \
         decoder utilization): a kind appears from the first export where it is not 0, then stays \
         (column *attributes*). The dashboard's \"Clocks held back by\" panel and the rules read \
         the reasons that are 1.\n\
         - `gpu_sidecar.sample.duration`: one series, the NVML calls of each sample together (by group \
         of calls with the setting).\n\n\
         `GPU_SIDECAR_METRICS_DETAIL=true` exports all of it from the start, every export.\n"
    ));
    s.push_str(
        "\n## Per pod (node mode)\n\n\
         Only `gpu-otel-sidecar node` (one agent per node) exports these: each pod's share of each device \
         it uses, on a resource of its own, the rest as the share of no known pod. They do not repeat the \
         device's metrics above, which node mode reports once, on the node's resource: summed over the \
         pods and the not-attributed share, memory, power and energy add up to the device's own. How \
         each share is computed: the *NVML source* column, and \
         [docs/kubernetes.md](kubernetes.md#one-agent-per-node). They are outside the series budget \
         above: each pod adds at most five series per device it uses (memory, utilization and \
         processes on the device its processes run on, power and energy on the physical GPU).\n\n",
    );
    s.push_str(&format!(
        "Every per-pod data point carries {POD_ATTRIBUTES}.\n\n"
    ));
    s.push_str(
        "| name | instrument | unit | attributes | NVML source and method | age | description |\n",
    );
    s.push_str("| --- | --- | --- | --- | --- | --- | --- |\n");
    for d in POD_CATALOGUE {
        s.push_str(&metric_row(d));
    }
    s.push_str(
        "\n## Valid ranges\n\n\
         NVML answers some values it does not have with `NVML_SUCCESS` and a sentinel \
         (`0xFFFFFFFF` for a temperature or power, 255 or 0 for the HBM temperature of a GPU \
         without that sensor, -1 as a signed field value, all-ones counters). A reading outside \
         its range below is dropped by the sampler before anything sees the sample: the value \
         is absent (not exported, not judged by the rules, not a run-report peak, an empty \
         sample-log field), and one warning per GPU and reading names the value and the range \
         (`src/sampling/bounds.rs`).\n\n",
    );
    s.push_str("| reading | valid (NVML unit) | metrics | why |\n| --- | --- | --- | --- |\n");
    for b in bounds::BOUNDS {
        let metrics: Vec<String> = VALID_RANGES
            .iter()
            .filter(|(r, _)| *r == b.reading)
            .flat_map(|(_, m)| m.iter().map(|n| format!("`{n}`")))
            .collect();
        s.push_str(&format!(
            "| {} | {} to {} {} | {} | {} |\n",
            b.name,
            b.min,
            b.max,
            b.unit,
            metrics.join(", "),
            cell(b.why)
        ));
    }
    s.push_str(
        "\n## Recorded as they happen\n\n\
         Synchronous instruments, counting from 0 at the agent's start, stamped with the export's \
         time. **A counter series is born with its first event** (nothing is exported for what never \
         happened): an `nvidia.gpu.xid.errors` series with the first XID of its code on its device, an \
         `nvidia.gpu.alerts` series with the first firing (or resolution) of its rule on its device. \
         Its start time is the agent's start, so its first point (1 for one event) says that the \
         count went from 0 to 1 since then: backends that take start times as created timestamps \
         see the step, and the shipped Prometheus rules catch a series born non-zero (`increase(x[5m]) \
         > 0 or (x unless last_over_time(x[5m] offset 5m))`: see [events.md](events.md#first-occurrences)).\n\n",
    );
    agent_table(&mut s, RECORDED);
    s.push_str(
        "\n## Self-metrics\n\n\
         How the agent's own NVML calls and exports fare, read from its counters at each export and \
         exported with the GPU metrics (same resource and scope). The counters count from the agent's \
         start (start time: the agent's start), each series born with its first event.\n\n",
    );
    agent_table(&mut s, SELF_METRICS);
    s
}

/// One catalogue row of a metrics table: name, instrument, unit, attributes, source, age,
/// description.
fn metric_row<X>(d: &MetricDef<X>) -> String {
    let cell = |t: &str| t.replace('|', "\\|");
    let attributes = match d.fold.doc() {
        Some(fold) => format!("{}; {fold}", d.attributes),
        None => d.attributes.to_string(),
    };
    format!(
        "| `{}` | {} | `{}` | {} | {} | {} | {} |\n",
        d.name,
        d.instrument.as_str(),
        d.unit,
        cell(&attributes),
        cell(d.source),
        cell(age(d.group)),
        cell(d.description)
    )
}

/// One table of agent metrics.
fn agent_table(s: &mut String, defs: &[&AgentMetricDef]) {
    let cell = |t: &str| t.replace('|', "\\|");
    s.push_str("| name | instrument | unit | attributes | source | description |\n");
    s.push_str("| --- | --- | --- | --- | --- | --- |\n");
    for d in defs {
        s.push_str(&format!(
            "| `{}` | {} | `{}` | {} | {} | {} |\n",
            d.name,
            d.instrument.as_str(),
            d.unit,
            cell(d.attributes),
            cell(d.source),
            cell(d.description)
        ));
    }
}
