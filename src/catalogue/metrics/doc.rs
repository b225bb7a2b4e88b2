//! `docs/metrics.md`, generated from the tables ([`markdown`]).

use super::{
    AgentMetricDef, MetricDef, CATALOGUE, COMMON_ATTRIBUTES, POD_ATTRIBUTES, POD_CATALOGUE,
    RECORDED, SELF_METRICS,
};

/// The most series one GPU's default export may carry (data points: one per metric and
/// attribute set, a histogram counting once): dcgm-exporter's default field list is about 21
/// per GPU, and managed Prometheus services bill per active series.
pub const SERIES_BUDGET: usize = 40;

/// Series in the largest export of the real H200 recording
/// (`tests/scenarios/h200-under-load.json`: one GPU, one process, the SW power cap on), as
/// measured by `tests/agent/e2e.rs` (`h200_default_export_stays_within_the_series_budget`)
/// and kept in `tests/golden/h200-series.json` (written again, with the golden export, by
/// `UPDATE_DOCS=1 cargo test`): a measurement, so not a constant of the code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct H200Series {
    /// With the default settings.
    pub default: usize,
    /// With `GPU_SIDECAR_METRICS_DETAIL=true`.
    pub detail: usize,
}
use crate::sampling::bounds;
use crate::sampling::SampleGroup;

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

/// `docs/metrics.md`, generated from [`CATALOGUE`], stating the series counts `h200` measured.
pub fn markdown(h200: H200Series) -> String {
    let mut s = String::from(
        "# Metrics\n\n\
         Generated from `src/catalogue/metrics/` (the test `metrics_doc_matches_catalogue` fails when \
         this file and the code disagree; regenerate every generated doc with `UPDATE_DOCS=1 cargo test --test docs`).\n\n\
         Ratios are 0..1, units are UCUM. A value NVML does not give is absent, never 0 (a kind of a \
         folded breakdown that has been 0 since the agent started is absent too, until it is not: \
         [Series budget](#series-budget)).\n\n",
    );
    s.push_str(&format!(
        "Every GPU data point carries {COMMON_ATTRIBUTES}. Every attribute key, with its values: \
         [attributes.md](attributes.md).\n\n"
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
         process, `tests/scenarios/h200-under-load.json`) carries **{}**, measured by \
         `tests/agent/e2e.rs` (`h200_default_export_stays_within_the_series_budget`) on every export of a run \
         and on all of them together; with `GPU_SIDECAR_METRICS_DETAIL=true`, {}. What \
         the default leaves out until it says something, or folds:\n\n\
         - Counters of events (`nvidia.gpu.alerts`, `nvidia.gpu.xid.errors`, \
         `gpu_sidecar.export.failures`, `gpu_sidecar.events.dropped`, `gpu_sidecar.nvml.*`) are born \
         with their first event, at 1 with the agent's start as start time, never exported at 0 \
         (see [events.md](events.md#first-occurrences)); so is `nvidia.gpu.xid.last_seen`, the time \
         of each XID code's last report, which the XID alert reads (one series per GPU and code \
         seen; none on a GPU without XIDs).\n\
         - Breakdowns by kind (the clock-event reasons, the non-tensor pipes, a process's encoder and \
         decoder utilization): a kind appears from the first export where it is not 0, then stays \
         (column *attributes*). The dashboard's \"Clocks held back by\" panel and the rules read \
         the reasons that are 1.\n\
         - `gpu_sidecar.sample.duration`: one series, the NVML calls of each sample together (by group \
         of calls with the setting).\n\n\
         `GPU_SIDECAR_METRICS_DETAIL=true` exports all of it from the start, every export.\n",
        h200.default,
        h200.detail,
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
        let holds = |bounds: &[&bounds::Bound]| bounds.iter().any(|x| x.name == b.name);
        let metrics: Vec<String> = CATALOGUE
            .iter()
            .filter(|d| holds(d.bounds))
            .map(|d| d.name)
            .chain(
                POD_CATALOGUE
                    .iter()
                    .filter(|d| holds(d.bounds))
                    .map(|d| d.name),
            )
            .map(|n| format!("`{n}`"))
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
         see the step. Prometheus behind the collector's exporter does not (no start times there, \
         and a restarted agent's count is born at 1 again), so the XID alert reads \
         `nvidia.gpu.xid.last_seen`, a gauge whose value is the last report's Unix time: it changes \
         at every XID, in every run ([events.md](events.md#first-occurrences)).\n\n",
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
