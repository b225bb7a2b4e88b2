//! Configuration: read once from the environment, validated into [`Config`].
//!
//! Standard OpenTelemetry variables (`OTEL_*`) are used where one exists; the agent's own
//! settings carry the prefix `GPU_SIDECAR_` and are read with `envy`. Nothing below this
//! module reads the environment: every other module takes what it needs from [`Config`].
//!
//! A bad value is a [`ConfigError`] naming the variable, the value and what it accepts;
//! the binary prints it as one line and exits with code 2.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::rules::catalogue::{Hold, HoldSpec, RuleId, ThresholdSpec, RULES};

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
    fn new(var: &str, value: &str, expected: impl Into<String>) -> Self {
        Self {
            var: var.to_string(),
            value: value.to_string(),
            expected: expected.into(),
        }
    }
}

/// OTLP transport, from `OTEL_EXPORTER_OTLP_PROTOCOL` (`grpc` | `http/protobuf`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/gRPC over tonic (default here; port 4317).
    Grpc,
    /// OTLP/HTTP with protobuf bodies (port 4318, paths `/v1/metrics`, `/v1/logs`).
    HttpProtobuf,
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

/// A string whose value never appears in logs, errors or debug output (OTLP header values
/// carry tokens).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The value, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The contents of a PEM file given in a setting (certificates; not secret). Debug output
/// shows only its size.
#[derive(Clone, PartialEq, Eq)]
pub struct Pem(Vec<u8>);

impl Pem {
    /// The file's bytes, as read at startup.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Pem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<PEM, {} bytes>", self.0.len())
    }
}

/// TLS material for the OTLP exporters, read from the PEM files named by the standard
/// variables (the OTel crates do not read them). Used for `https://` endpoints only.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsFiles {
    /// Trusted CA certificate(s) for the collector's certificate,
    /// `OTEL_EXPORTER_OTLP_CERTIFICATE`. `None`: the system's trust store.
    pub ca: Option<Pem>,
    /// Client certificate chain for mutual TLS, `OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE`.
    pub client_certificate: Option<Pem>,
    /// Client private key (PEM, PKCS#8, PKCS#1 or SEC1), `OTEL_EXPORTER_OTLP_CLIENT_KEY`.
    /// Given together with the certificate, or not at all. Secret.
    pub client_key: Option<Secret>,
}

impl TlsFiles {
    /// Whether any TLS file was given.
    pub fn is_set(&self) -> bool {
        self.ca.is_some() || self.client_certificate.is_some()
    }
}

/// One OTLP exporter's settings (metrics or logs), from the standard `OTEL_EXPORTER_OTLP_*`
/// variables: the signal's own form (`OTEL_EXPORTER_OTLP_METRICS_TIMEOUT`,
/// `OTEL_EXPORTER_OTLP_LOGS_PROTOCOL`, …) wins over the general one
/// (`OTEL_EXPORTER_OTLP_TIMEOUT`), as the OTLP exporter specification says.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpExporter {
    /// Transport, `OTEL_EXPORTER_OTLP_[SIGNAL_]PROTOCOL`; default gRPC.
    pub protocol: Protocol,
    /// Full URL: `OTEL_EXPORTER_OTLP_{METRICS,LOGS}_ENDPOINT` as given, or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (plus `/v1/metrics` or `/v1/logs` over HTTP). Defaults:
    /// `http://localhost:4317` (gRPC), `http://localhost:4318/v1/{metrics,logs}` (HTTP).
    pub endpoint: String,
    /// Headers sent with every request, `OTEL_EXPORTER_OTLP_[SIGNAL_]HEADERS` (`k=v,k2=v2`,
    /// values percent-decoded). Values are secrets.
    pub headers: Vec<(String, Secret)>,
    /// Bound on one export, retries included, `OTEL_EXPORTER_OTLP_[SIGNAL_]TIMEOUT` in
    /// milliseconds; default 10000.
    pub timeout: Duration,
    /// gzip compression, `OTEL_EXPORTER_OTLP_[SIGNAL_]COMPRESSION` (`gzip` | `none`);
    /// default none.
    pub gzip: bool,
    /// CA and client certificate files (`OTEL_EXPORTER_OTLP_[SIGNAL_]CERTIFICATE`,
    /// `…_CLIENT_CERTIFICATE`, `…_CLIENT_KEY`).
    pub tls: TlsFiles,
    /// `OTEL_EXPORTER_OTLP_[SIGNAL_]INSECURE`: a schemeless endpoint was taken as `http://`
    /// (already applied to [`OtlpExporter::endpoint`]).
    pub insecure: bool,
}

/// Which OTLP signal an [`OtlpExporter`] is for: the infix of its per-signal variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// `OTEL_EXPORTER_OTLP_METRICS_*`, path `/v1/metrics`.
    Metrics,
    /// `OTEL_EXPORTER_OTLP_LOGS_*`, path `/v1/logs` (the agent's events).
    Logs,
}

impl Signal {
    /// `METRICS` or `LOGS`.
    pub fn infix(self) -> &'static str {
        match self {
            Signal::Metrics => "METRICS",
            Signal::Logs => "LOGS",
        }
    }

    /// The OTLP/HTTP path: `v1/metrics` or `v1/logs`.
    pub fn http_path(self) -> &'static str {
        match self {
            Signal::Metrics => "v1/metrics",
            Signal::Logs => "v1/logs",
        }
    }
}

/// Aggregation temporality the metrics exporter is asked for,
/// `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE` (case-insensitive), as the OTLP
/// exporter specification defines it per instrument kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TemporalityPreference {
    /// `cumulative` (default): every sum and histogram is cumulative.
    #[default]
    Cumulative,
    /// `delta`: counters (monotonic sums) and histograms are delta; up-down counters stay
    /// cumulative.
    Delta,
    /// `lowmemory`: synchronous counters and histograms (those the agent records as things
    /// happen: XIDs, alerts, sample durations) are delta; observable counters (read from
    /// NVML or the agent's state) and up-down counters stay cumulative.
    LowMemory,
}

/// OTLP settings for both signals the agent exports.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpConfig {
    /// The metrics exporter (`OTEL_EXPORTER_OTLP_METRICS_*` over `OTEL_EXPORTER_OTLP_*`).
    pub metrics: OtlpExporter,
    /// The events' (log records') exporter (`OTEL_EXPORTER_OTLP_LOGS_*` over
    /// `OTEL_EXPORTER_OTLP_*`).
    pub logs: OtlpExporter,
    /// `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`; default cumulative.
    pub temporality: TemporalityPreference,
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

/// The events' batch log processor, from the `OTEL_BLRP_*` variables (given to the SDK's
/// `BatchConfigBuilder` explicitly: the SDK would otherwise read them itself and silently
/// ignore a bad value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogsBatch {
    /// `OTEL_BLRP_SCHEDULE_DELAY` (ms): time between two exports of queued events;
    /// default 1000.
    pub schedule_delay: Duration,
    /// `OTEL_BLRP_MAX_QUEUE_SIZE`: events held while the collector is slow or down (more
    /// are dropped); default 2048.
    pub max_queue_size: usize,
    /// `OTEL_BLRP_MAX_EXPORT_BATCH_SIZE`: events per export; default 512, at most the queue
    /// size.
    pub max_export_batch_size: usize,
}

impl Default for LogsBatch {
    fn default() -> Self {
        Self {
            schedule_delay: Duration::from_millis(1000),
            max_queue_size: 2048,
            max_export_batch_size: 512,
        }
    }
}

impl Config {
    /// The bound on one metrics export, retries included: the smaller of
    /// `OTEL_METRIC_EXPORT_TIMEOUT` and the metrics exporter's OTLP timeout.
    pub fn metrics_export_bound(&self) -> Duration {
        self.metric_export_timeout.min(self.otlp.metrics.timeout)
    }
}

/// What the agent does with one standard OpenTelemetry variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtelUse {
    /// Read and applied (a bad value stops the agent with exit 2 naming it).
    Honoured,
    /// Does not apply to this agent: when set, it is named in one warning at start, with
    /// why, and otherwise ignored.
    NotApplied,
}

/// One standard OpenTelemetry environment variable (SDK environment specification, OTLP
/// exporter specification): the row of `docs/otel-variables.md`.
#[derive(Debug, Clone, Copy)]
pub struct OtelVariable {
    /// Its name; a trailing `*` stands for every variable with that prefix.
    pub name: &'static str,
    /// Honoured or not.
    pub used: OtelUse,
    /// Default, in words (`-` where it does not apply).
    pub default: &'static str,
    /// What the agent does with it.
    pub what: &'static str,
    /// A value a test sets (`<ca>`, `<cert>`, `<key>`: PEM files the test writes).
    pub example: &'static str,
}

macro_rules! honoured {
    ($name:expr, $default:expr, $what:expr, $example:expr) => {
        OtelVariable {
            name: $name,
            used: OtelUse::Honoured,
            default: $default,
            what: $what,
            example: $example,
        }
    };
}

macro_rules! not_applied {
    ($name:expr, $what:expr, $example:expr) => {
        OtelVariable {
            name: $name,
            used: OtelUse::NotApplied,
            default: "-",
            what: $what,
            example: $example,
        }
    };
}

macro_rules! otlp_rows {
    ($infix:literal, $scope:literal) => {
        [
            honoured!(
                concat!("OTEL_EXPORTER_OTLP_", $infix, "ENDPOINT"),
                "`http://localhost:4317` (gRPC), `http://localhost:4318` (HTTP)",
                concat!("collector URL for ", $scope, "; the general one gets `/v1/metrics` or `/v1/logs` appended over HTTP, a per-signal one is used as given; a schemeless `host:port` means https unless insecure"),
                "http://collector.example:4317"
            ),
            honoured!(
                concat!("OTEL_EXPORTER_OTLP_", $infix, "PROTOCOL"),
                "`grpc`",
                concat!("`grpc` or `http/protobuf` for ", $scope, " (`http/json` is refused)"),
                "http/protobuf"
            ),
            honoured!(
                concat!("OTEL_EXPORTER_OTLP_", $infix, "HEADERS"),
                "none",
                concat!("`key=value,…` (percent-encoded values) sent with every request of ", $scope, "; values never appear in logs"),
                "authorization=Bearer%20t0k"
            ),
            honoured!(
                concat!("OTEL_EXPORTER_OTLP_", $infix, "TIMEOUT"),
                "`10000`",
                concat!("milliseconds: bound on one export of ", $scope, ", retries included"),
                "2500"
            ),
            honoured!(
                concat!("OTEL_EXPORTER_OTLP_", $infix, "COMPRESSION"),
                "`none`",
                concat!("`gzip` or `none` for ", $scope),
                "gzip"
            ),
            honoured!(
                concat!("OTEL_EXPORTER_OTLP_", $infix, "CERTIFICATE"),
                "system trust store",
                concat!("PEM file of the CA(s) trusted for the collector's certificate (`https://` endpoints), for ", $scope),
                "<ca>"
            ),
            honoured!(
                concat!("OTEL_EXPORTER_OTLP_", $infix, "CLIENT_CERTIFICATE"),
                "none",
                concat!("PEM client certificate chain for mutual TLS, for ", $scope, "; with the client key"),
                "<cert>"
            ),
            honoured!(
                concat!("OTEL_EXPORTER_OTLP_", $infix, "CLIENT_KEY"),
                "none",
                concat!("PEM private key of the client certificate, for ", $scope, "; never logged"),
                "<key>"
            ),
            honoured!(
                concat!("OTEL_EXPORTER_OTLP_", $infix, "INSECURE"),
                "`false`",
                concat!("`true`: a schemeless endpoint for ", $scope, " means `http://` (no TLS)"),
                "true"
            ),
        ]
    };
}

const OTLP_GENERAL: [OtelVariable; 9] = otlp_rows!("", "metrics and events");
const OTLP_METRICS: [OtelVariable; 9] =
    otlp_rows!("METRICS_", "metrics (wins over the general one)");
const OTLP_LOGS: [OtelVariable; 9] = otlp_rows!("LOGS_", "events (wins over the general one)");

/// Every standard `OTEL_*` variable that could reach a metrics-and-logs exporter, and what
/// the agent does with it. `docs/otel-variables.md` is generated from it; a set variable
/// that is not in here is named in the start-up warning as unknown.
pub static OTEL_VARIABLES: &[OtelVariable] = &[
    honoured!("OTEL_SDK_DISABLED", "`false`", "`true`: nothing is exported (metrics and events); sampling, rules, the run report, the sample log and health go on", "true"),
    honoured!("OTEL_SERVICE_NAME", "`gpu-otel-sidecar`", "`service.name`", "trainer-gpus"),
    honoured!("OTEL_RESOURCE_ATTRIBUTES", "none", "`key=value,…` added to the resource; wins over the `K8S_*` variables", "team=vision"),
    honoured!("OTEL_METRICS_EXPORTER", "`otlp`", "`otlp`, `console` (one line of OTLP/JSON per export on stdout) or `none`", "console"),
    honoured!("OTEL_LOGS_EXPORTER", "`otlp` (`console` when `OTEL_METRICS_EXPORTER=console`)", "events: `otlp`, `console` or `none`", "none"),
    honoured!("OTEL_METRIC_EXPORT_INTERVAL", "`10000`", "milliseconds between metric exports (each right after a sample)", "2000"),
    honoured!("OTEL_METRIC_EXPORT_TIMEOUT", "`30000`", "milliseconds: bound on one metrics export, retries included (the OTLP timeout bounds it too; the smaller wins)", "4000"),
    honoured!("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "`cumulative`", "`cumulative`; `delta` (counters and the histogram delta, up-down counters cumulative); `lowmemory` (what the agent records as it happens, XIDs, alerts and sample durations, delta; counters read from NVML or its own state cumulative)", "delta"),
    honoured!("OTEL_BLRP_SCHEDULE_DELAY", "`1000`", "milliseconds between two exports of queued events", "500"),
    honoured!("OTEL_BLRP_MAX_QUEUE_SIZE", "`2048`", "events held while the collector is slow or down; more are dropped", "100"),
    honoured!("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE", "`512`", "events per export (at most the queue size)", "50"),
    OTLP_GENERAL[0], OTLP_GENERAL[1], OTLP_GENERAL[2], OTLP_GENERAL[3], OTLP_GENERAL[4],
    OTLP_GENERAL[5], OTLP_GENERAL[6], OTLP_GENERAL[7], OTLP_GENERAL[8],
    OTLP_METRICS[0], OTLP_METRICS[1], OTLP_METRICS[2], OTLP_METRICS[3], OTLP_METRICS[4],
    OTLP_METRICS[5], OTLP_METRICS[6], OTLP_METRICS[7], OTLP_METRICS[8],
    OTLP_LOGS[0], OTLP_LOGS[1], OTLP_LOGS[2], OTLP_LOGS[3], OTLP_LOGS[4],
    OTLP_LOGS[5], OTLP_LOGS[6], OTLP_LOGS[7], OTLP_LOGS[8],
    not_applied!("OTEL_BLRP_EXPORT_TIMEOUT", "the SDK's thread-based batch processor has no export timeout; each events export is bounded by the OTLP timeout", "5000"),
    not_applied!("OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION", "the one histogram (`gpu_sidecar.sample.duration`) has fixed explicit buckets", "base2_exponential_bucket_histogram"),
    not_applied!("OTEL_METRICS_EXEMPLAR_FILTER", "no exemplars: the agent has no traces to link to", "always_on"),
    not_applied!("OTEL_LOG_LEVEL", "the agent's own log level is `GPU_SIDECAR_LOG_LEVEL`", "debug"),
    not_applied!("OTEL_PROPAGATORS", "no context propagation: the agent has no traces", "tracecontext"),
    not_applied!("OTEL_CONFIG_FILE", "no declarative configuration file: the agent reads environment variables only", "/etc/otel/sdk.yaml"),
    not_applied!("OTEL_EXPERIMENTAL_CONFIG_FILE", "as `OTEL_CONFIG_FILE`", "/etc/otel/sdk.yaml"),
    not_applied!("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "attributes are the catalogue's, bounded by design", "128"),
    not_applied!("OTEL_ATTRIBUTE_COUNT_LIMIT", "attributes are the catalogue's, bounded by design", "64"),
    not_applied!("OTEL_LOGRECORD_ATTRIBUTE_VALUE_LENGTH_LIMIT", "event attributes are the agent's own, bounded by design", "128"),
    not_applied!("OTEL_LOGRECORD_ATTRIBUTE_COUNT_LIMIT", "event attributes are the agent's own, bounded by design", "64"),
    not_applied!("OTEL_EXPORTER_OTLP_METRIC_INSECURE", "obsolete name: use `OTEL_EXPORTER_OTLP_METRICS_INSECURE`", "true"),
    not_applied!("OTEL_EXPORTER_OTLP_SPAN_INSECURE", "obsolete name, and the agent has no traces", "true"),
    not_applied!("OTEL_TRACES_*", "the agent exports no traces", "otlp"),
    not_applied!("OTEL_EXPORTER_OTLP_TRACES_*", "the agent exports no traces", "http://collector:4317"),
    not_applied!("OTEL_BSP_*", "span batching: the agent exports no traces", "5000"),
    not_applied!("OTEL_SPAN_*", "span limits: the agent exports no traces", "128"),
    not_applied!("OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT", "span event limits: the agent exports no traces", "128"),
    not_applied!("OTEL_LINK_ATTRIBUTE_COUNT_LIMIT", "span link limits: the agent exports no traces", "128"),
    not_applied!("OTEL_EXPORTER_PROMETHEUS_*", "no Prometheus endpoint: the agent pushes OTLP (a collector's Prometheus exporter serves it)", "9464"),
    not_applied!("OTEL_EXPORTER_ZIPKIN_*", "no Zipkin exporter", "http://zipkin:9411"),
    not_applied!("OTEL_EXPORTER_JAEGER_*", "no Jaeger exporter", "jaeger"),
];

/// The row of [`OTEL_VARIABLES`] for `name` (exact, or the longest matching `PREFIX_*`).
pub fn otel_variable(name: &str) -> Option<&'static OtelVariable> {
    OTEL_VARIABLES.iter().find(|v| v.name == name).or_else(|| {
        OTEL_VARIABLES
            .iter()
            .filter(|v| {
                v.name
                    .strip_suffix('*')
                    .is_some_and(|prefix| name.starts_with(prefix))
            })
            .max_by_key(|v| v.name.len())
    })
}

/// `docs/otel-variables.md`, generated from [`OTEL_VARIABLES`].
pub fn otel_variables_markdown() -> String {
    let mut s = String::from(
        "# Standard OpenTelemetry variables\n\n\
         Generated from `OTEL_VARIABLES` in `src/config.rs` (the test `otel_variables_doc_matches_the_table` \
         fails when this file and the code disagree; regenerate with `UPDATE_DOCS=1 cargo test --lib otel_variables_doc`).\n\n\
         Every variable of the OpenTelemetry SDK environment and OTLP exporter specifications that could \
         reach a metrics-and-logs exporter, and what the agent does with it. *Honoured*: read and applied; \
         a bad value stops the agent with exit code 2 and one line naming the variable and what it accepts. \
         *Not applied*: when set, it is named, with the reason, in one warning at start, and ignored; any \
         other `OTEL_*` variable that is set is named in that warning as unknown. A per-signal variable \
         (`OTEL_EXPORTER_OTLP_METRICS_*`, `OTEL_EXPORTER_OTLP_LOGS_*`) wins over the general one for its \
         signal; the events are the logs signal. An empty variable counts as unset.\n\n",
    );
    s.push_str("| variable | | default | what the agent does |\n| --- | --- | --- | --- |\n");
    for v in OTEL_VARIABLES {
        let used = match v.used {
            OtelUse::Honoured => "honoured",
            OtelUse::NotApplied => "not applied",
        };
        s.push_str(&format!(
            "| `{}` | {used} | {} | {} |\n",
            v.name,
            v.default,
            v.what.replace('|', "\\|")
        ));
    }
    s
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

/// One alert rule's settings: `GPU_SIDECAR_RULE_<NAME>_ENABLED`, `_THRESHOLD`, and
/// `_DURATION` or `_SAMPLES` (which ones a rule reads, their units and defaults:
/// [`crate::rules::catalogue::RULES`], `docs/events.md`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RuleSettings {
    /// `_ENABLED` (`true`/`false`); default true.
    pub enabled: bool,
    /// `_THRESHOLD` in the rule's unit (e.g. percent of total memory); `None` for a rule
    /// without one.
    pub threshold: Option<f64>,
    /// The second threshold (`_UTILIZATION`, `_SM_ACTIVITY`, …) in its unit; `None` for a
    /// rule without one.
    pub second_threshold: Option<f64>,
    /// `_DURATION` or `_SAMPLES`: how long the condition must hold.
    pub hold: Hold,
}

/// The settings of every rule, in the rule table's order.
#[derive(Debug, Clone, PartialEq)]
pub struct RulesConfig(pub Vec<(RuleId, RuleSettings)>);

impl RulesConfig {
    /// One rule's settings.
    ///
    /// # Panics
    /// Never for a `RulesConfig` built by [`Config::from_vars`] (it has every rule).
    pub fn get(&self, id: RuleId) -> RuleSettings {
        self.0
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, s)| *s)
            .expect("RulesConfig holds every rule")
    }

    /// Whether any rule is enabled.
    pub fn any_enabled(&self) -> bool {
        self.0.iter().any(|(_, s)| s.enabled)
    }
}

fn parse_rules<'a>(get: &impl Fn(&str) -> Option<&'a str>) -> Result<RulesConfig, ConfigError> {
    let mut out = Vec::with_capacity(RULES.len());
    for spec in RULES {
        let var = spec.var("ENABLED");
        let enabled = match get(&var) {
            None => true,
            Some(v) => parse_bool(&var, v)?,
        };
        let threshold = match spec.threshold {
            None => None,
            Some(t) => {
                let var = spec.var("THRESHOLD");
                Some(match get(&var) {
                    None => t.default,
                    Some(v) => parse_threshold(&var, v, &t)?,
                })
            }
        };
        let second_threshold = match spec.second_threshold {
            None => None,
            Some(t) => {
                let var = spec.var(t.suffix);
                Some(match get(&var) {
                    None => t.spec.default,
                    Some(v) => parse_threshold(&var, v, &t.spec)?,
                })
            }
        };
        let hold = match spec.hold {
            HoldSpec::Immediate => Hold::Immediate,
            HoldSpec::Duration(d) => {
                let var = spec.var("DURATION");
                Hold::Duration(match get(&var) {
                    None => d,
                    Some(v) => parse_duration(&var, v)?,
                })
            }
            HoldSpec::Samples(n) => {
                let var = spec.var("SAMPLES");
                Hold::Samples(match get(&var) {
                    None => n,
                    Some(v) => match v.trim().parse::<u32>() {
                        Ok(n) if n > 0 => n,
                        _ => {
                            return Err(ConfigError::new(
                                &var,
                                v,
                                "a whole number of consecutive samples, at least 1",
                            ))
                        }
                    },
                })
            }
        };
        out.push((
            spec.id,
            RuleSettings {
                enabled,
                threshold,
                second_threshold,
                hold,
            },
        ));
    }
    Ok(RulesConfig(out))
}

fn parse_threshold(var: &str, v: &str, t: &ThresholdSpec) -> Result<f64, ConfigError> {
    let raw = v.trim();
    let raw = if t.percent {
        raw.strip_suffix('%').unwrap_or(raw).trim_end()
    } else {
        raw
    };
    let low = if t.min_exclusive { "above" } else { "from" };
    let expected = format!("a number {low} {} up to {} ({})", t.min, t.max, t.unit);
    match raw.parse::<f64>() {
        Ok(x) if x.is_finite() && (x > t.min || (!t.min_exclusive && x == t.min)) && x <= t.max => {
            Ok(x)
        }
        _ => Err(ConfigError::new(var, v, expected)),
    }
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

/// `OTEL_BLRP_*` (see [`LogsBatch`]).
fn parse_logs_batch<'a>(get: &impl Fn(&str) -> Option<&'a str>) -> Result<LogsBatch, ConfigError> {
    let mut b = LogsBatch::default();
    if let Some(v) = get("OTEL_BLRP_SCHEDULE_DELAY") {
        b.schedule_delay = parse_millis("OTEL_BLRP_SCHEDULE_DELAY", v)?;
    }
    let count = |var: &str, v: &str| match v.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(ConfigError::new(var, v, "a whole number greater than zero")),
    };
    if let Some(v) = get("OTEL_BLRP_MAX_QUEUE_SIZE") {
        b.max_queue_size = count("OTEL_BLRP_MAX_QUEUE_SIZE", v)?;
    }
    if let Some(v) = get("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE") {
        b.max_export_batch_size = count("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE", v)?;
    }
    // As the specification says: a batch is never larger than the queue.
    b.max_export_batch_size = b.max_export_batch_size.min(b.max_queue_size);
    Ok(b)
}

fn output_target(v: &str) -> OutputTarget {
    if v == "-" {
        OutputTarget::Stdout
    } else {
        OutputTarget::Path(PathBuf::from(v))
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

/// The variable that sets `name` for `signal`: its per-signal form
/// (`OTEL_EXPORTER_OTLP_METRICS_TIMEOUT`) when set, else the general one
/// (`OTEL_EXPORTER_OTLP_TIMEOUT`); with its value.
fn signal_var<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
    signal: Signal,
    name: &str,
) -> Option<(String, &'a str)> {
    let own = format!("OTEL_EXPORTER_OTLP_{}_{name}", signal.infix());
    if let Some(v) = get(&own) {
        return Some((own, v));
    }
    let general = format!("OTEL_EXPORTER_OTLP_{name}");
    get(&general).map(|v| (general, v))
}

fn parse_otlp<'a>(get: &impl Fn(&str) -> Option<&'a str>) -> Result<OtlpConfig, ConfigError> {
    const VAR: &str = "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE";
    let temporality = match get(VAR).map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        None | Some("cumulative") => TemporalityPreference::Cumulative,
        Some("delta") => TemporalityPreference::Delta,
        Some("lowmemory") => TemporalityPreference::LowMemory,
        Some(_) => {
            return Err(ConfigError::new(
                VAR,
                get(VAR).unwrap_or_default(),
                "cumulative, delta or lowmemory",
            ))
        }
    };
    Ok(OtlpConfig {
        metrics: parse_exporter_settings(get, Signal::Metrics)?,
        logs: parse_exporter_settings(get, Signal::Logs)?,
        temporality,
    })
}

/// One signal's exporter settings (see [`OtlpExporter`]).
fn parse_exporter_settings<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
    signal: Signal,
) -> Result<OtlpExporter, ConfigError> {
    let var = |name: &str| signal_var(get, signal, name);
    let protocol = match var("PROTOCOL") {
        None => Protocol::Grpc,
        Some((_, "grpc")) => Protocol::Grpc,
        Some((_, "http/protobuf")) => Protocol::HttpProtobuf,
        Some((name, v)) => {
            return Err(ConfigError::new(
                &name,
                v,
                "grpc or http/protobuf (http/json is not supported)",
            ))
        }
    };
    let insecure = match var("INSECURE") {
        None => false,
        Some((name, v)) => parse_bool(&name, v)?,
    };
    let own_endpoint = format!("OTEL_EXPORTER_OTLP_{}_ENDPOINT", signal.infix());
    let endpoint = match get(&own_endpoint) {
        // The per-signal endpoint is the full URL, used as given.
        Some(v) => check_endpoint(&own_endpoint, v, insecure)?,
        None => {
            let base = match get("OTEL_EXPORTER_OTLP_ENDPOINT") {
                Some(v) => check_endpoint("OTEL_EXPORTER_OTLP_ENDPOINT", v, insecure)?,
                None => match protocol {
                    Protocol::Grpc => "http://localhost:4317".to_string(),
                    Protocol::HttpProtobuf => "http://localhost:4318".to_string(),
                },
            };
            match protocol {
                Protocol::Grpc => base,
                Protocol::HttpProtobuf => {
                    format!("{}/{}", base.trim_end_matches('/'), signal.http_path())
                }
            }
        }
    };
    let headers = match var("HEADERS") {
        None => Vec::new(),
        Some((name, v)) => parse_key_values(&name, v, true)?
            .into_iter()
            .map(|(k, v)| {
                let k = k.to_ascii_lowercase();
                let ok = tonic::codegen::http::HeaderName::from_bytes(k.as_bytes()).is_ok()
                    && tonic::codegen::http::HeaderValue::from_str(&v).is_ok();
                if ok {
                    Ok((k, Secret(v)))
                } else {
                    Err(ConfigError::new(
                        &name,
                        "<redacted>",
                        format!("valid HTTP header names and visible ASCII values (the entry for {k:?} is not)"),
                    ))
                }
            })
            .collect::<Result<_, _>>()?,
    };
    let timeout = match var("TIMEOUT") {
        None => Duration::from_millis(10_000),
        Some((name, v)) => parse_millis(&name, v)?,
    };
    let gzip = match var("COMPRESSION") {
        None => false,
        Some((_, "none")) => false,
        Some((_, "gzip")) => true,
        Some((name, v)) => return Err(ConfigError::new(&name, v, "gzip or none")),
    };
    let tls = parse_tls(get, signal)?;
    Ok(OtlpExporter {
        protocol,
        endpoint,
        headers,
        timeout,
        gzip,
        tls,
        insecure,
    })
}

/// Reads and checks the PEM files of the TLS variables: each must be readable and hold what
/// it should (certificates, or one private key); the client certificate and key come as a
/// pair. Errors name the variable and the path, never the key's contents.
fn parse_tls<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
    signal: Signal,
) -> Result<TlsFiles, ConfigError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    // Each file comes from its per-signal variable when set, else from the general one; the
    // errors name the variable that was read.
    let ca_var = signal_var(get, signal, "CERTIFICATE");
    let cert_var = signal_var(get, signal, "CLIENT_CERTIFICATE");
    let key_var = signal_var(get, signal, "CLIENT_KEY");
    let name_of = |v: &Option<(String, &str)>, general: &str| {
        v.as_ref()
            .map_or_else(|| general.to_string(), |(n, _)| n.clone())
    };
    let (ca_name, cert_name, key_name) = (
        name_of(&ca_var, "OTEL_EXPORTER_OTLP_CERTIFICATE"),
        name_of(&cert_var, "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"),
        name_of(&key_var, "OTEL_EXPORTER_OTLP_CLIENT_KEY"),
    );
    let (ca_v, cert_v, key_v) = (ca_name.as_str(), cert_name.as_str(), key_name.as_str());
    let read = |var: &str, path: &str, what: &str| -> Result<Vec<u8>, ConfigError> {
        std::fs::read(path).map_err(|e| {
            ConfigError::new(var, path, format!("a readable PEM file with {what} ({e})"))
        })
    };
    let certificates = |var: &str, path: &str| -> Result<Pem, ConfigError> {
        let what = "one or more certificates";
        let bytes = read(var, path, what)?;
        let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(&bytes).collect();
        match certs {
            Ok(c) if !c.is_empty() => Ok(Pem(bytes)),
            Ok(_) => Err(ConfigError::new(
                var,
                path,
                format!("a PEM file with {what} (none found)"),
            )),
            Err(e) => Err(ConfigError::new(
                var,
                path,
                format!("a PEM file with {what} ({e})"),
            )),
        }
    };
    let ca = ca_var.map(|(_, p)| certificates(ca_v, p)).transpose()?;
    let client_certificate = cert_var.map(|(_, p)| certificates(cert_v, p)).transpose()?;
    let client_key = match key_var.map(|(_, p)| p) {
        None => None,
        Some(path) => {
            let what = "one private key (PKCS#8, PKCS#1 or SEC1)";
            let bytes = read(key_v, path, what)?;
            if PrivateKeyDer::from_pem_slice(&bytes).is_err() {
                return Err(ConfigError::new(
                    key_v,
                    path,
                    format!("a PEM file with {what}"),
                ));
            }
            match String::from_utf8(bytes) {
                Ok(text) => Some(Secret(text)),
                Err(_) => {
                    return Err(ConfigError::new(
                        key_v,
                        path,
                        format!("a PEM file with {what}"),
                    ))
                }
            }
        }
    };
    match (&client_certificate, &client_key) {
        (Some(_), None) => {
            return Err(ConfigError::new(
                key_v,
                "",
                format!("a private key file: {cert_v} is set, and mutual TLS needs both"),
            ))
        }
        (None, Some(_)) => {
            return Err(ConfigError::new(
                cert_v,
                "",
                format!("a certificate file: {key_v} is set, and mutual TLS needs both"),
            ))
        }
        _ => {}
    }
    Ok(TlsFiles {
        ca,
        client_certificate,
        client_key,
    })
}

/// An endpoint must be an `http://` or `https://` URL. A schemeless `host:port` means
/// https, or http when `OTEL_EXPORTER_OTLP_INSECURE=true`.
fn check_endpoint(var: &str, v: &str, insecure: bool) -> Result<String, ConfigError> {
    let expected = "a URL such as http://otel-collector:4317 (or host:port)";
    let url = if v.starts_with("http://") || v.starts_with("https://") {
        v.to_string()
    } else if v.contains("://") {
        return Err(ConfigError::new(var, v, expected));
    } else if insecure {
        format!("http://{v}")
    } else {
        format!("https://{v}")
    };
    match url.parse::<tonic::codegen::http::Uri>() {
        Ok(uri) if uri.host().is_some() => Ok(url),
        _ => Err(ConfigError::new(var, v, expected)),
    }
}

/// Durations are written with a unit: `500ms`, `5s`, `1m` (humantime syntax); zero is refused.
pub fn parse_duration(var: &str, v: &str) -> Result<Duration, ConfigError> {
    let expected = "a duration with a unit such as 500ms, 5s or 1m, greater than zero";
    match humantime::parse_duration(v.trim()) {
        Ok(d) if !d.is_zero() => Ok(d),
        _ => Err(ConfigError::new(var, v, expected)),
    }
}

fn parse_millis(var: &str, v: &str) -> Result<Duration, ConfigError> {
    match v.trim().parse::<u64>() {
        Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err(ConfigError::new(
            var,
            v,
            "a whole number of milliseconds greater than zero, such as 10000",
        )),
    }
}

/// A level name (`error` … `trace`, `off`) or directives `target=level`, comma-separated.
/// A bare word that is not a level is refused (tracing would read it as a target name and
/// silently log nothing of ours).
fn valid_log_filter(v: &str) -> bool {
    const LEVELS: &[&str] = &["off", "error", "warn", "info", "debug", "trace"];
    let is_level = |s: &str| LEVELS.contains(&s.trim().to_ascii_lowercase().as_str());
    v.split(',').all(|d| match d.split_once('=') {
        None => is_level(d),
        Some((target, level)) => !target.trim().is_empty() && is_level(level),
    }) && tracing_subscriber::EnvFilter::try_new(v).is_ok()
}

fn parse_bool(var: &str, v: &str) -> Result<bool, ConfigError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(ConfigError::new(var, v, "true or false")),
    }
}

fn parse_exporter(var: &str, v: &str) -> Result<ExporterKind, ConfigError> {
    match v.trim() {
        "otlp" => Ok(ExporterKind::Otlp),
        "console" => Ok(ExporterKind::Console),
        "none" => Ok(ExporterKind::None),
        _ => Err(ConfigError::new(var, v, "otlp, console or none")),
    }
}

fn parse_devices(v: &str) -> Result<DeviceSelection, ConfigError> {
    let expected = "all, pod-resources, or a comma-separated list of NVML indices and GPU-/MIG- UUIDs such as 0,GPU-8f6c…";
    let v = v.trim();
    if v == "all" {
        return Ok(DeviceSelection::All);
    }
    if v == "pod-resources" {
        return Ok(DeviceSelection::PodResources);
    }
    let mut ids = Vec::new();
    for item in v.split(',').map(str::trim) {
        if let Ok(i) = item.parse::<u32>() {
            ids.push(DeviceId::Index(i));
        } else if (item.starts_with("GPU-") || item.starts_with("MIG-")) && item.len() > 4 {
            ids.push(DeviceId::Uuid(item.to_string()));
        } else {
            return Err(ConfigError::new("GPU_SIDECAR_DEVICES", v, expected));
        }
    }
    Ok(DeviceSelection::List(ids))
}

/// Parses the W3C-baggage-like `key=value,key2=value2` lists of `OTEL_RESOURCE_ATTRIBUTES`
/// and `OTEL_EXPORTER_OTLP_HEADERS`; values are percent-decoded. With `secret`, the value
/// in an error is redacted.
fn parse_key_values(
    var: &str,
    v: &str,
    secret: bool,
) -> Result<Vec<(String, String)>, ConfigError> {
    let shown = if secret { "<redacted>" } else { v };
    let mut out = Vec::new();
    for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((k, val)) = item.split_once('=') else {
            return Err(ConfigError::new(
                var,
                shown,
                "a comma-separated list of key=value pairs",
            ));
        };
        let k = k.trim();
        if k.is_empty() {
            return Err(ConfigError::new(
                var,
                shown,
                "a comma-separated list of key=value pairs with non-empty keys",
            ));
        }
        let val = percent_encoding::percent_decode_str(val.trim())
            .decode_utf8()
            .map_err(|_| ConfigError::new(var, shown, "percent-encoded UTF-8 values"))?;
        out.push((k.to_string(), val.into_owned()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
