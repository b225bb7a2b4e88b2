//! Configuration: read once from the environment, validated into [`Config`].
//!
//! Standard OpenTelemetry variables (`OTEL_*`) are used where one exists; the agent's own
//! settings carry the prefix `GPU_SIDECAR_` and are read with `envy`. Nothing below this
//! module reads the environment: every other module takes what it needs from [`Config`].
//!
//! A bad value is a [`ConfigError`] naming the variable, the value and what it accepts;
//! the binary prints it as one line and exits with code 2.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::rules::catalogue::RULES;

mod otel;
mod otlp;
mod rules;
mod values;

pub use otel::{otel_variable, otel_variables_markdown, OtelUse, OtelVariable, OTEL_VARIABLES};
pub use otlp::{
    LogsBatch, OtlpConfig, OtlpExporter, Pem, Protocol, Secret, Signal, TemporalityPreference,
    TlsFiles,
};
pub use rules::{RuleSettings, RulesConfig};
pub use values::parse_duration;

use otlp::{parse_logs_batch, parse_otlp};
use rules::parse_rules;
use values::{
    output_target, parse_bool, parse_devices, parse_exporter, parse_key_values, parse_millis,
    valid_log_filter,
};

/// Prefix of the agent's own settings.
pub const PREFIX: &str = "GPU_SIDECAR_";

/// Default `service.name` when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES`
/// names one.
pub const DEFAULT_SERVICE_NAME: &str = "gpu-otel-sidecar";

/// The NVML library loaded when `GPU_SIDECAR_NVML_LIBRARY` is unset: the soname that the
/// NVIDIA driver installs and the NVIDIA Container Toolkit injects.
pub const DEFAULT_NVML_LIBRARY: &str = "libnvidia-ml.so.1";

/// A setting that could not be accepted: the variable, the value as given and what the
/// variable accepts. Displayed as one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {var}={value:?}: expected {expected}")]
pub struct ConfigError {
    /// Name of the environment variable, e.g. `GPU_SIDECAR_SAMPLE_INTERVAL`.
    pub var: String,
    /// The value as read (secrets are replaced by `<redacted>`).
    pub value: String,
    /// What the variable accepts, in words.
    pub expected: String,
}

impl ConfigError {
    pub(crate) fn new(var: &str, value: &str, expected: impl Into<String>) -> Self {
        Self {
            var: var.to_string(),
            value: value.to_string(),
            expected: expected.into(),
        }
    }
}

/// Where a signal goes, from `OTEL_METRICS_EXPORTER` / `OTEL_LOGS_EXPORTER`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExporterKind {
    /// OTLP to the configured endpoint.
    Otlp,
    /// One line of OTLP/JSON per export on stdout.
    Console,
    /// Not exported.
    None,
}

/// Log line format for the agent's own logs (on stderr), `GPU_SIDECAR_LOG_FORMAT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Which GPUs to report, `GPU_SIDECAR_DEVICES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSelection {
    /// Every device NVML shows.
    All,
    /// Only these: NVML indices, GPU UUIDs (`GPU-…`) or MIG UUIDs (`MIG-…`).
    List(Vec<DeviceId>),
    /// The devices the kubelet allocated to this pod (`pod-resources`): asked at start from
    /// the pod-resources socket, then resolved into [`DeviceSelection::Allocated`].
    PodResources,
    /// The devices the kubelet's pod-resources API lists for this pod (what
    /// [`DeviceSelection::PodResources`] resolves to at start).
    Allocated(Vec<AllocatedDevice>),
}

/// One entry of a device list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceId {
    /// NVML device index (as `nvidia-smi` numbers GPUs).
    Index(u32),
    /// A GPU UUID (`GPU-…`) or MIG device UUID (`MIG-…`).
    Uuid(String),
    /// A GPU by its device-file minor number (`/dev/nvidia<N>`, `nvmlDeviceGetMinorNumber`):
    /// GKE's device plugin names GPUs `nvidia<N>`.
    Minor(u32),
    /// A MIG device by its GPU's NVML index and its MIG device index
    /// (`nvmlDeviceGetMigDeviceHandleByIndex`): the NVIDIA device plugin's `index` strategy
    /// names MIG devices `<gpu>:<mig>`.
    MigIndex {
        /// The GPU's NVML index.
        gpu: u32,
        /// The MIG device index on it.
        mig: u32,
    },
    /// A MIG device by its GPU's minor number and its GPU instance id
    /// (`nvmlDeviceGetGpuInstanceId`): GKE names MIG partitions `nvidia<N>/gi<K>`.
    GpuInstance {
        /// The GPU's device-file minor number.
        minor: u32,
        /// The GPU instance id.
        gpu_instance_id: u32,
    },
}

/// `GPU_SIDECAR_DEVICES=pod-resources` in words for log lines: the variable, and the Helm
/// chart value that sets it (users of the chart never set the variable themselves).
pub const POD_RESOURCES_MODE: &str =
    "GPU_SIDECAR_DEVICES=pod-resources (the Helm chart's gpuVisibility.mode=pod-resources)";

/// A device the kubelet allocated to this pod, as its device plugin named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocatedDevice {
    /// The GPU or MIG device NVML shows for it.
    pub id: DeviceId,
    /// The device plugin's id, as the kubelet lists it (e.g. `nvidia1/vgpu3`), for logs.
    pub plugin_id: String,
    /// Whether the plugin hands out this device as one replica of a shared GPU
    /// (time-slicing: `<uuid>::<n>`, `nvidia<N>/vgpu<M>`): other pods may hold it too.
    pub shared: bool,
}

/// How often each slow group of NVML calls is made (the fast fields are read every sample
/// interval, static facts once per NVML session); at which ticks:
/// [`crate::sampling::cadence`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlowIntervals {
    /// Per-process utilization (`nvmlDeviceGetProcessUtilization`, ~2 ms on an H200),
    /// `GPU_SIDECAR_PROCESS_INTERVAL`; default 10 s.
    pub process: Duration,
    /// GPM profiling metrics (`nvmlGpmSampleGet` + `nvmlGpmMetricsGet`, ~3.8 ms),
    /// `GPU_SIDECAR_GPM_INTERVAL`; default 10 s. Also the window each GPM value averages over.
    pub gpm: Duration,
    /// Total energy (`nvmlDeviceGetTotalEnergyConsumption`, ~3.2 ms of CPU),
    /// `GPU_SIDECAR_ENERGY_INTERVAL`; default 10 s.
    pub energy: Duration,
    /// PCIe throughput (`nvmlDeviceGetPcieThroughput`, blocks ~20 ms per direction), only on
    /// GPUs without GPM, `GPU_SIDECAR_PCIE_INTERVAL`; default 30 s.
    pub pcie: Duration,
}

impl Default for SlowIntervals {
    fn default() -> Self {
        Self {
            process: Duration::from_secs(10),
            gpm: Duration::from_secs(10),
            energy: Duration::from_secs(10),
            pcie: Duration::from_secs(30),
        }
    }
}

/// The whole validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// How often NVML is read, `GPU_SIDECAR_SAMPLE_INTERVAL`; default 5 s.
    pub sample_interval: Duration,
    /// How often metrics are exported, `OTEL_METRIC_EXPORT_INTERVAL` (ms); default 10 s.
    pub export_interval: Duration,
    /// Cadence of the slow NVML groups (`GPU_SIDECAR_{PROCESS,GPM,ENERGY,PCIE}_INTERVAL`).
    pub slow_intervals: SlowIntervals,
    /// Which GPUs, `GPU_SIDECAR_DEVICES`; default all.
    pub devices: DeviceSelection,
    /// Kubelet pod-resources socket, `GPU_SIDECAR_POD_RESOURCES_SOCKET`; default
    /// `/var/lib/kubelet/pod-resources/kubelet.sock`. Used with `GPU_SIDECAR_DEVICES=pod-resources`.
    pub pod_resources_socket: PathBuf,
    /// Exit (as on SIGTERM) once a process with this name (`/proc/<pid>/comm`) has been seen
    /// and is gone, `GPU_SIDECAR_EXIT_WITH_PROCESS`: for classic (non-native) sidecars that
    /// share the pod's process namespace, so a Job completes. Default: unset.
    pub exit_with_process: Option<String>,
    /// Whether `NVIDIA_VISIBLE_DEVICES=all` (the container sees every GPU of the node): with
    /// `GPU_SIDECAR_DEVICES=all` in a pod, the agent then warns that it reports them all.
    pub sees_all_node_gpus: bool,
    /// NVML library to dlopen, `GPU_SIDECAR_NVML_LIBRARY`; default `libnvidia-ml.so.1`.
    pub nvml_library: PathBuf,
    /// Agent log format, `GPU_SIDECAR_LOG_FORMAT`; default text.
    pub log_format: LogFormat,
    /// Agent log filter (tracing `EnvFilter` syntax), `GPU_SIDECAR_LOG_LEVEL`; default `info`.
    pub log_level: String,
    /// Bound on the final export and NVML shutdown after SIGTERM/SIGINT,
    /// `GPU_SIDECAR_SHUTDOWN_TIMEOUT`; default 5 s.
    pub shutdown_timeout: Duration,
    /// Metrics destination, `OTEL_METRICS_EXPORTER`; default otlp.
    pub metrics_exporter: ExporterKind,
    /// Events (OTel log records) destination, `OTEL_LOGS_EXPORTER`; default otlp, or console
    /// when the metrics go to the console.
    pub logs_exporter: ExporterKind,
    /// OTLP settings (used when an exporter is `otlp`).
    pub otlp: OtlpConfig,
    /// Health endpoint (`/healthz`, `/readyz`), `GPU_SIDECAR_HEALTH_ADDR`; default
    /// `0.0.0.0:13134`; `None` when `off`.
    pub health_addr: Option<SocketAddr>,
    /// A sampler tick running longer than this is reported stuck (readiness false, one log
    /// line), `GPU_SIDECAR_WATCHDOG_TIMEOUT`; default three sample intervals, at least 10 s.
    pub watchdog_timeout: Duration,
    /// `service.name`: `OTEL_SERVICE_NAME`, else `service.name` in
    /// `OTEL_RESOURCE_ATTRIBUTES`, else `gpu-otel-sidecar`.
    pub service_name: String,
    /// Resource attributes from the Downward API variables (`K8S_POD_NAME` → `k8s.pod.name`,
    /// …) merged with `OTEL_RESOURCE_ATTRIBUTES`, which wins on conflict. Empty variables
    /// add nothing. `service.name` is not in here (see `service_name`).
    pub resource_attributes: BTreeMap<String, String>,
    /// Where the run report goes besides the `gpu.run.report` event,
    /// `GPU_SIDECAR_REPORT_FILE` (a path, or `-` for one JSON line on stdout); default none.
    pub report_file: Option<OutputTarget>,
    /// The local sample log, `GPU_SIDECAR_SAMPLE_LOG` (+ `_FORMAT`, `_MAX_BYTES`); default off.
    pub sample_log: Option<SampleLogConfig>,
    /// Alert rules, `GPU_SIDECAR_RULE_<NAME>_*`; defaults in `src/rules/catalogue.rs`.
    pub rules: RulesConfig,
    /// Bound on one metrics export, retries included, `OTEL_METRIC_EXPORT_TIMEOUT` (ms);
    /// default 30000. The OTLP exporter's own timeout bounds it too (see
    /// [`Config::metrics_export_bound`]).
    pub metric_export_timeout: Duration,
    /// The events' batch processor (`OTEL_BLRP_*`).
    pub logs_batch: LogsBatch,
    /// `OTEL_SDK_DISABLED=true`: nothing is exported (metrics and events), whatever the
    /// exporters say; sampling, rules, the run report, the sample log and health go on.
    pub sdk_disabled: bool,
    /// Standard `OTEL_*` variables that are set but do not apply to this agent, each with
    /// why; named in one warning at start (see [`OTEL_VARIABLES`]).
    pub otel_not_applied: Vec<(String, &'static str)>,
    /// Price of one GPU-hour, `GPU_SIDECAR_PRICE_PER_GPU_HOUR` (any currency; no default):
    /// the run report's `cost` and `idle_cost`.
    pub price_per_gpu_hour: Option<f64>,
}

impl Config {
    /// The bound on one metrics export, retries included: the smaller of
    /// `OTEL_METRIC_EXPORT_TIMEOUT` and the metrics exporter's OTLP timeout.
    pub fn metrics_export_bound(&self) -> Duration {
        self.metric_export_timeout.min(self.otlp.metrics.timeout)
    }
}

/// A file path, or standard output (written `-`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputTarget {
    /// Standard output.
    Stdout,
    /// This file.
    Path(PathBuf),
}

/// Format of the sample log, `GPU_SIDECAR_SAMPLE_LOG_FORMAT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleLogFormat {
    /// Comma-separated values with one header line (RFC 4180).
    Csv,
    /// One JSON object per line.
    Jsonl,
}

/// Default rotation size of the sample log: 100 MiB.
pub const DEFAULT_SAMPLE_LOG_MAX_BYTES: u64 = 100 * 1024 * 1024;

/// The local sample log's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleLogConfig {
    /// Where rows go, `GPU_SIDECAR_SAMPLE_LOG`.
    pub target: OutputTarget,
    /// Row format, `GPU_SIDECAR_SAMPLE_LOG_FORMAT`; default CSV.
    pub format: SampleLogFormat,
    /// A file is rotated (renamed to `<path>.1`, replacing the previous one) before it would
    /// grow past this many bytes, `GPU_SIDECAR_SAMPLE_LOG_MAX_BYTES`; default 100 MiB.
    /// Not used for stdout.
    pub max_bytes: u64,
    /// `GPU_SIDECAR_SAMPLE_INTERVAL`: a sample taken less than half of it after the
    /// previous row (the final sample at shutdown, right after a tick) is not written, so the
    /// log does not end with a near-copy of its last row.
    pub sample_interval: Duration,
}

/// The agent's own variables, as strings, read with `envy` (prefix `GPU_SIDECAR_`).
#[derive(Debug, Default, Deserialize)]
struct RawOwn {
    sample_interval: Option<String>,
    devices: Option<String>,
    nvml_library: Option<String>,
    log_format: Option<String>,
    log_level: Option<String>,
    shutdown_timeout: Option<String>,
    pod_resources_socket: Option<String>,
    exit_with_process: Option<String>,
    report_file: Option<String>,
    sample_log: Option<String>,
    sample_log_format: Option<String>,
    sample_log_max_bytes: Option<String>,
    health_addr: Option<String>,
    watchdog_timeout: Option<String>,
    process_interval: Option<String>,
    gpm_interval: Option<String>,
    energy_interval: Option<String>,
    pcie_interval: Option<String>,
    price_per_gpu_hour: Option<String>,
}

/// Every `GPU_SIDECAR_*` variable the agent knows (without the prefix); any other one is
/// rejected as a probable typo, except the webhook's
/// ([`crate::webhook::settings::SETTINGS`], which the `webhook` command reads).
pub const KNOWN_SETTINGS: &[&str] = &[
    "SAMPLE_INTERVAL",
    "DEVICES",
    "NVML_LIBRARY",
    "LOG_FORMAT",
    "LOG_LEVEL",
    "SHUTDOWN_TIMEOUT",
    "POD_RESOURCES_SOCKET",
    "EXIT_WITH_PROCESS",
    "REPORT_FILE",
    "SAMPLE_LOG",
    "SAMPLE_LOG_FORMAT",
    "SAMPLE_LOG_MAX_BYTES",
    // Alert rules (src/rules/catalogue.rs, docs/events.md); a test checks this list
    // against the rule table.
    "RULE_MEMORY_NEAR_FULL_ENABLED",
    "RULE_MEMORY_NEAR_FULL_THRESHOLD",
    "RULE_MEMORY_NEAR_FULL_DURATION",
    "RULE_MEMORY_PREALLOCATED_ENABLED",
    "RULE_MEMORY_PREALLOCATED_THRESHOLD",
    "RULE_MEMORY_PREALLOCATED_DURATION",
    "RULE_MEMORY_LEAK_ENABLED",
    "RULE_MEMORY_LEAK_THRESHOLD",
    "RULE_MEMORY_LEAK_DURATION",
    "RULE_TEMPERATURE_HIGH_ENABLED",
    "RULE_TEMPERATURE_HIGH_THRESHOLD",
    "RULE_TEMPERATURE_HIGH_SAMPLES",
    "RULE_CLOCKS_POWER_CAPPED_ENABLED",
    "RULE_CLOCKS_POWER_CAPPED_DURATION",
    "RULE_CLOCKS_SLOWDOWN_ENABLED",
    "RULE_CLOCKS_SLOWDOWN_DURATION",
    "RULE_INPUT_STARVATION_ENABLED",
    "RULE_INPUT_STARVATION_THRESHOLD",
    "RULE_INPUT_STARVATION_DURATION",
    "RULE_UTILIZATION_IMBALANCE_ENABLED",
    "RULE_UTILIZATION_IMBALANCE_THRESHOLD",
    "RULE_UTILIZATION_IMBALANCE_DURATION",
    "RULE_TENSOR_CORES_IDLE_ENABLED",
    "RULE_TENSOR_CORES_IDLE_THRESHOLD",
    "RULE_TENSOR_CORES_IDLE_UTILIZATION",
    "RULE_TENSOR_CORES_IDLE_DURATION",
    "RULE_MEMORY_BOUND_ENABLED",
    "RULE_MEMORY_BOUND_THRESHOLD",
    "RULE_MEMORY_BOUND_SM_ACTIVITY",
    "RULE_MEMORY_BOUND_DURATION",
    "RULE_GPU_LOST_ENABLED",
    "RULE_XID_ENABLED",
    "RULE_XID_DURATION",
    "HEALTH_ADDR",
    "WATCHDOG_TIMEOUT",
    "PROCESS_INTERVAL",
    "GPM_INTERVAL",
    "ENERGY_INTERVAL",
    "PCIE_INTERVAL",
    "PRICE_PER_GPU_HOUR",
];

/// Every standard `OTEL_*` variable the agent reads, as `--help` and the README's settings
/// table name them: the per-signal forms as the patterns `OTEL_EXPORTER_OTLP_METRICS_*` and
/// `OTEL_EXPORTER_OTLP_LOGS_*`. Each is an honoured row of [`OTEL_VARIABLES`] (a test checks
/// both ways).
pub const OTEL_SETTINGS: &[&str] = &[
    "OTEL_METRICS_EXPORTER",
    "OTEL_LOGS_EXPORTER",
    "OTEL_SDK_DISABLED",
    "OTEL_METRIC_EXPORT_INTERVAL",
    "OTEL_METRIC_EXPORT_TIMEOUT",
    "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_COMPRESSION",
    "OTEL_EXPORTER_OTLP_INSECURE",
    "OTEL_EXPORTER_OTLP_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_CLIENT_KEY",
    "OTEL_EXPORTER_OTLP_METRICS_*",
    "OTEL_EXPORTER_OTLP_LOGS_*",
    "OTEL_BLRP_SCHEDULE_DELAY",
    "OTEL_BLRP_MAX_QUEUE_SIZE",
    "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
];

/// The names of every setting, for `gpu-otel-sidecar --help`: lines of at most 100
/// characters, one group per line start (`GPU_SIDECAR_*`, the alert rules with their
/// suffixes in braces as the README writes them, `OTEL_*`, the Downward API `K8S_*`).
pub fn settings_help() -> String {
    let own = KNOWN_SETTINGS
        .iter()
        .filter(|s| !s.starts_with("RULE_"))
        .map(|s| format!("{PREFIX}{s}"));
    let rules = RULES.iter().map(|r| match r.setting_suffixes().as_slice() {
        [one] => format!("{PREFIX}RULE_{}_{one}", r.env),
        many => format!("{PREFIX}RULE_{}_{{{}}}", r.env, many.join(",")),
    });
    let groups: [Vec<String>; 4] = [
        own.collect(),
        rules.collect(),
        OTEL_SETTINGS.iter().map(|s| s.to_string()).collect(),
        DOWNWARD_API.iter().map(|(v, _)| v.to_string()).collect(),
    ];
    let mut out = String::new();
    for group in groups {
        let mut line = String::from(" ");
        for name in group {
            if line.len() + 1 + name.len() > 100 {
                out.push_str(&line);
                out.push('\n');
                line = String::from(" ");
            }
            line.push(' ');
            line.push_str(&name);
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// The known setting (without the prefix) nearest to `unknown`, when it is near enough to
/// be a typo of it: normalized Damerau-Levenshtein similarity of at least 0.6 (up to four
/// letters wrong, swapped, missing or extra in a name of ten or more).
fn nearest_setting(unknown: &str) -> Option<&'static str> {
    let webhook = crate::webhook::settings::SETTINGS
        .iter()
        .filter_map(|s| s.name.strip_prefix(PREFIX));
    KNOWN_SETTINGS
        .iter()
        .copied()
        .chain(webhook)
        .map(|known| {
            (
                strsim::normalized_damerau_levenshtein(unknown, known),
                known,
            )
        })
        .filter(|(similarity, _)| *similarity >= 0.6)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, known)| known)
}

/// Default `GPU_SIDECAR_HEALTH_ADDR`: every interface (kubelet probes come from the node), a
/// port next to the Collector's health port 13133.
pub const DEFAULT_HEALTH_ADDR: &str = "0.0.0.0:13134";

/// Downward API variables and the resource attribute each one sets.
pub const DOWNWARD_API: &[(&str, &str)] = &[
    ("K8S_POD_NAME", "k8s.pod.name"),
    ("K8S_POD_UID", "k8s.pod.uid"),
    ("K8S_NAMESPACE_NAME", "k8s.namespace.name"),
    ("K8S_NODE_NAME", "k8s.node.name"),
    ("K8S_CONTAINER_NAME", "k8s.container.name"),
];

impl Config {
    /// Reads and validates the process environment.
    ///
    /// # Errors
    /// The first [`ConfigError`] found, naming the variable.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_vars(std::env::vars())
    }

    /// Reads and validates the given variables (the environment, or a test's map).
    ///
    /// # Errors
    /// The first [`ConfigError`] found, naming the variable.
    pub fn from_vars<I: IntoIterator<Item = (String, String)>>(
        vars: I,
    ) -> Result<Self, ConfigError> {
        let vars: BTreeMap<String, String> = vars.into_iter().collect();
        for key in vars.keys() {
            if let Some(rest) = key.strip_prefix(PREFIX) {
                if !KNOWN_SETTINGS.contains(&rest)
                    && !crate::webhook::settings::is_webhook_setting(key)
                {
                    let hint = match nearest_setting(rest) {
                        Some(near) => format!("did you mean {PREFIX}{near}? "),
                        None => String::new(),
                    };
                    return Err(ConfigError::new(
                        key,
                        &vars[key],
                        format!("no such setting; {hint}(all settings: gpu-otel-sidecar --help)"),
                    ));
                }
            }
        }
        let raw: RawOwn = envy::prefixed(PREFIX)
            .from_iter(vars.iter().map(|(k, v)| (k.clone(), v.clone())))
            .map_err(|e| ConfigError::new(PREFIX, "", e.to_string()))?;
        let get = |name: &str| vars.get(name).map(String::as_str).filter(|v| !v.is_empty());

        let report_file = raw
            .report_file
            .as_deref()
            .filter(|v| !v.is_empty())
            .map(output_target);
        let sample_interval = match raw.sample_interval.as_deref() {
            None | Some("") => Duration::from_secs(5),
            Some(v) => parse_duration("GPU_SIDECAR_SAMPLE_INTERVAL", v)?,
        };
        let sample_log = parse_sample_log(&raw, sample_interval)?;
        let shutdown_timeout = match raw.shutdown_timeout.as_deref() {
            None | Some("") => Duration::from_secs(5),
            Some(v) => parse_duration("GPU_SIDECAR_SHUTDOWN_TIMEOUT", v)?,
        };
        let mut slow_intervals = SlowIntervals::default();
        for (value, var, slot) in [
            (
                &raw.process_interval,
                "GPU_SIDECAR_PROCESS_INTERVAL",
                &mut slow_intervals.process,
            ),
            (
                &raw.gpm_interval,
                "GPU_SIDECAR_GPM_INTERVAL",
                &mut slow_intervals.gpm,
            ),
            (
                &raw.energy_interval,
                "GPU_SIDECAR_ENERGY_INTERVAL",
                &mut slow_intervals.energy,
            ),
            (
                &raw.pcie_interval,
                "GPU_SIDECAR_PCIE_INTERVAL",
                &mut slow_intervals.pcie,
            ),
        ] {
            if let Some(v) = value.as_deref().filter(|v| !v.is_empty()) {
                *slot = parse_duration(var, v)?;
            }
        }
        let devices = match raw.devices.as_deref() {
            None | Some("") => DeviceSelection::All,
            Some(v) => parse_devices(v)?,
        };
        if devices == DeviceSelection::PodResources
            && (get("K8S_POD_NAME").is_none() || get("K8S_NAMESPACE_NAME").is_none())
        {
            return Err(ConfigError::new(
                "GPU_SIDECAR_DEVICES",
                "pod-resources",
                "K8S_POD_NAME and K8S_NAMESPACE_NAME to be set too (Downward API), to find this pod's GPUs",
            ));
        }
        let pod_resources_socket = raw
            .pod_resources_socket
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/var/lib/kubelet/pod-resources/kubelet.sock"));
        let exit_with_process = raw.exit_with_process.filter(|v| !v.is_empty());
        if let Some(name) = &exit_with_process {
            // /proc/<pid>/comm holds at most 15 bytes.
            if name.len() > 15 || name.contains('/') {
                return Err(ConfigError::new(
                    "GPU_SIDECAR_EXIT_WITH_PROCESS",
                    name,
                    "a process name as in /proc/<pid>/comm (at most 15 characters, no '/'), e.g. python",
                ));
            }
        }
        let nvml_library = raw
            .nvml_library
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_NVML_LIBRARY));
        let log_format = match raw.log_format.as_deref() {
            None | Some("") | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(v) => {
                return Err(ConfigError::new(
                    "GPU_SIDECAR_LOG_FORMAT",
                    v,
                    "text or json",
                ))
            }
        };
        let log_level = raw
            .log_level
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "info".to_string());
        if !valid_log_filter(&log_level) {
            return Err(ConfigError::new(
                "GPU_SIDECAR_LOG_LEVEL",
                &log_level,
                "a level (error, warn, info, debug, trace) or tracing filter directives such as info,gpu_otel_sidecar=debug",
            ));
        }

        let export_interval = match get("OTEL_METRIC_EXPORT_INTERVAL") {
            None => Duration::from_millis(10_000),
            Some(v) => parse_millis("OTEL_METRIC_EXPORT_INTERVAL", v)?,
        };
        let metrics_exporter = match get("OTEL_METRICS_EXPORTER") {
            None => ExporterKind::Otlp,
            Some(v) => parse_exporter("OTEL_METRICS_EXPORTER", v)?,
        };
        let logs_exporter = match get("OTEL_LOGS_EXPORTER") {
            // Console metrics mean "show me here": the events come along, rather than going
            // to a collector the user did not ask for.
            None if metrics_exporter == ExporterKind::Console => ExporterKind::Console,
            None => ExporterKind::Otlp,
            Some(v) => parse_exporter("OTEL_LOGS_EXPORTER", v)?,
        };
        let otlp = parse_otlp(&get)?;
        let sdk_disabled = match get("OTEL_SDK_DISABLED") {
            None => false,
            Some(v) => parse_bool("OTEL_SDK_DISABLED", v)?,
        };
        let (metrics_exporter, logs_exporter) = if sdk_disabled {
            (ExporterKind::None, ExporterKind::None)
        } else {
            (metrics_exporter, logs_exporter)
        };
        let metric_export_timeout = match get("OTEL_METRIC_EXPORT_TIMEOUT") {
            None => Duration::from_millis(30_000),
            Some(v) => parse_millis("OTEL_METRIC_EXPORT_TIMEOUT", v)?,
        };
        let logs_batch = parse_logs_batch(&get)?;
        let otel_not_applied = vars
            .iter()
            .filter(|(k, v)| k.starts_with("OTEL_") && !v.is_empty())
            .filter_map(|(k, _)| match otel_variable(k) {
                Some(row) if row.used == OtelUse::Honoured => None,
                Some(row) => Some((k.clone(), row.what)),
                None => Some((
                    k.clone(),
                    "not a variable of the OpenTelemetry SDK or OTLP exporter specifications that the agent knows",
                )),
            })
            .collect();
        let health_addr = match raw.health_addr.as_deref().map(str::trim) {
            None | Some("") => Some(DEFAULT_HEALTH_ADDR.parse().expect("valid default")),
            Some("off") => None,
            Some(v) => Some(v.parse::<SocketAddr>().map_err(|_| {
                ConfigError::new(
                    "GPU_SIDECAR_HEALTH_ADDR",
                    v,
                    "an IP address and port such as 0.0.0.0:13134, or off",
                )
            })?),
        };
        let price_per_gpu_hour = match raw.price_per_gpu_hour.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(v) => match v.parse::<f64>() {
                Ok(p) if p.is_finite() && p >= 0.0 => Some(p),
                _ => {
                    return Err(ConfigError::new(
                        "GPU_SIDECAR_PRICE_PER_GPU_HOUR",
                        v,
                        "a price per GPU-hour: a number from 0, in any currency, e.g. 2.50",
                    ))
                }
            },
        };
        let watchdog_timeout = match raw.watchdog_timeout.as_deref() {
            None | Some("") => (sample_interval * 3).max(Duration::from_secs(10)),
            Some(v) => parse_duration("GPU_SIDECAR_WATCHDOG_TIMEOUT", v)?,
        };

        let mut resource_attributes = BTreeMap::new();
        for (var, key) in DOWNWARD_API {
            if let Some(v) = get(var) {
                resource_attributes.insert((*key).to_string(), v.to_string());
            }
        }
        let mut service_name = None;
        if let Some(v) = get("OTEL_RESOURCE_ATTRIBUTES") {
            for (k, val) in parse_key_values("OTEL_RESOURCE_ATTRIBUTES", v, false)? {
                if k == "service.name" {
                    service_name = Some(val);
                } else {
                    resource_attributes.insert(k, val);
                }
            }
        }
        if let Some(v) = get("OTEL_SERVICE_NAME") {
            service_name = Some(v.to_string());
        }

        Ok(Config {
            sample_interval,
            export_interval,
            slow_intervals,
            devices,
            pod_resources_socket,
            exit_with_process,
            sees_all_node_gpus: get("NVIDIA_VISIBLE_DEVICES") == Some("all"),
            nvml_library,
            log_format,
            log_level,
            shutdown_timeout,
            metrics_exporter,
            logs_exporter,
            otlp,
            health_addr,
            watchdog_timeout,
            service_name: service_name.unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_string()),
            resource_attributes,
            report_file,
            sample_log,
            rules: parse_rules(&get)?,
            metric_export_timeout,
            logs_batch,
            sdk_disabled,
            otel_not_applied,
            price_per_gpu_hour,
        })
    }
}

/// `GPU_SIDECAR_SAMPLE_LOG*`. The format and size are validated even when the log is off.
fn parse_sample_log(
    raw: &RawOwn,
    sample_interval: Duration,
) -> Result<Option<SampleLogConfig>, ConfigError> {
    let format = match raw.sample_log_format.as_deref() {
        None | Some("") | Some("csv") => SampleLogFormat::Csv,
        Some("jsonl") => SampleLogFormat::Jsonl,
        Some(v) => {
            return Err(ConfigError::new(
                "GPU_SIDECAR_SAMPLE_LOG_FORMAT",
                v,
                "csv or jsonl",
            ))
        }
    };
    let max_bytes = match raw.sample_log_max_bytes.as_deref() {
        None | Some("") => DEFAULT_SAMPLE_LOG_MAX_BYTES,
        Some(v) => match v.trim().parse::<bytesize::ByteSize>() {
            Ok(b) if b.as_u64() > 0 => b.as_u64(),
            _ => return Err(ConfigError::new(
                "GPU_SIDECAR_SAMPLE_LOG_MAX_BYTES",
                v,
                "a size greater than zero in bytes, or with a unit such as 512KiB, 100MiB or 1GB",
            )),
        },
    };
    Ok(raw
        .sample_log
        .as_deref()
        .filter(|v| !v.is_empty())
        .map(|v| SampleLogConfig {
            target: output_target(v),
            format,
            max_bytes,
            sample_interval,
        }))
}

#[cfg(test)]
mod tests;
