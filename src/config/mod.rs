//! Configuration: read once from the environment, validated into [`Config`].
//!
//! Standard OpenTelemetry variables (`OTEL_*`) are used where one exists; the agent's own
//! settings carry the prefix `GPU_SIDECAR_` and are rows of one table
//! ([`settings::SETTINGS`]) that the parsing reads them through. Nothing below this module
//! reads the environment: every other module takes what it needs from [`Config`].
//!
//! Where things are: [`settings`] (the agent's and the webhook's settings: a new setting
//! is a row there, then a field of [`Config`] read in [`Config::from_vars`]), [`known`]
//! (the unknown-name check, `--help`'s list and `docs/settings.md`, from every table),
//! `otel` (the standard `OTEL_*` table, each honoured variable's default typed on its row),
//! `otlp` (the exporters' settings), `rules` (the alert rules' settings), `devices`
//! (`GPU_SIDECAR_DEVICES`' types), `error` ([`ConfigError`]), `values` (readers shared by
//! several settings), `tests` (with `tests/names.rs` and `tests/otel.rs`).
//!
//! A bad value is a [`ConfigError`] naming the variable, the value and what it accepts;
//! the binary prints it as one line and exits with code 2.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

mod devices;
mod error;
pub mod job;
pub mod known;
mod node;
mod otel;
mod otlp;
mod rules;
pub mod settings;
mod summary;
mod values;

pub use devices::{AllocatedDevice, DeviceId, DeviceSelection, POD_RESOURCES_MODE};
pub use error::{ConfigError, ConfigProblem};
pub use node::NODE_MODE_DROPS;
pub use otel::{
    otel_variable, otel_variables_markdown, OtelDefault, OtelUse, OtelVariable, OTEL_VARIABLES,
};
pub use otlp::{
    LogsBatch, OtlpConfig, OtlpExporter, Pem, Protocol, Secret, Signal, TemporalityPreference,
    TlsFiles, DEFAULT_EVENTS_QUEUE_SIZE,
};
pub use rules::{RuleSettings, RulesConfig};
pub use settings::PREFIX;
pub use summary::summary;
pub use values::parse_duration;

use settings as S;
use settings::Setting;

use crate::catalogue::resource;
use otlp::{parse_logs_batch, parse_otlp};
use rules::parse_rules;
use values::{output_target, parse_bool, parse_devices, parse_key_values, valid_log_filter};

/// Default `service.name` when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES`
/// names one.
pub const DEFAULT_SERVICE_NAME: &str = "gpu-otel-sidecar";

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

impl ExporterKind {
    /// The `OTEL_METRICS_EXPORTER` / `OTEL_LOGS_EXPORTER` value: `otlp`, `console` or `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            ExporterKind::Otlp => "otlp",
            ExporterKind::Console => "console",
            ExporterKind::None => "none",
        }
    }
}

/// Log line format for the agent's own logs (on stderr), `GPU_SIDECAR_LOG_FORMAT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
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
    /// Export the detail series from the start (every clock-event reason, pipe and
    /// per-process video engine; the sample duration by group), `GPU_SIDECAR_METRICS_DETAIL`;
    /// default false (the series budget, docs/metrics.md).
    pub metrics_detail: bool,
    /// Which GPUs, `GPU_SIDECAR_DEVICES`; default all.
    pub devices: DeviceSelection,
    /// Kubelet pod-resources socket, `GPU_SIDECAR_POD_RESOURCES_SOCKET`; default
    /// `/var/lib/kubelet/pod-resources/kubelet.sock`. Used with `GPU_SIDECAR_DEVICES=pod-resources`.
    pub pod_resources_socket: PathBuf,
    /// Exit (as on SIGTERM) once a process with this name (`/proc/<pid>/comm`) has been seen
    /// and is gone, `GPU_SIDECAR_EXIT_WITH_PROCESS`: for classic (non-native) sidecars that
    /// share the pod's process namespace, so a Job completes. Default: unset.
    pub exit_with_process: Option<String>,
    /// Where processes are read, `GPU_SIDECAR_PROC_ROOT`; default `/proc`.
    pub proc_root: PathBuf,
    /// Node mode (`gpu-otel-sidecar node`, [`Config::into_node`]): every GPU of the node on
    /// the node's resource, each pod's share of each device. `false` for the sidecar.
    pub node: bool,
    /// Exit (as on SIGTERM) once no process of the pod's other containers is left,
    /// `GPU_SIDECAR_EXIT_WITH_CONTAINERS=true`: for classic sidecars whatever the trainer's
    /// process is called (see [`crate::process_watch`]). Default: false.
    pub exit_with_containers: bool,
    /// The pod's `restartPolicy`, `GPU_SIDECAR_POD_RESTART_POLICY` (default as `Never`): with
    /// `OnFailure` the exit rules wait out the kubelet's restarts; `Always` refuses them.
    pub pod_restart_policy: crate::process_watch::RestartPolicy,
    /// `GPU_SIDECAR_RESTART_WAIT`: with `OnFailure`, how long the trainer must stay gone.
    pub restart_wait: crate::process_watch::RestartWait,
    /// Whether the agent runs in a Kubernetes pod: `KUBERNETES_SERVICE_HOST` (set by the
    /// kubelet in every container) or `K8S_POD_NAME` (the chart's Downward API) is set.
    pub in_kubernetes: bool,
    /// `NVIDIA_VISIBLE_DEVICES` and `NVIDIA_DRIVER_CAPABILITIES` as set (the NVIDIA
    /// Container Toolkit's variables): what the advice for a missing NVML library says.
    pub toolkit: ToolkitEnv,
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
    pub health_addr: Option<HealthAddr>,
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
    /// `GPU_SIDECAR_REPORT_HTML`: where the run report's HTML page is written at shutdown.
    pub report_html: Option<PathBuf>,
    /// The local sample log, `GPU_SIDECAR_SAMPLE_LOG` (+ `_FORMAT`, `_MAX_BYTES`); default off.
    pub sample_log: Option<SampleLogConfig>,
    /// Alert rules, `GPU_SIDECAR_RULE_<NAME>_*`; defaults in `src/rules/catalogue.rs`.
    pub rules: RulesConfig,
    /// Bound on one metrics export, retries included, `OTEL_METRIC_EXPORT_TIMEOUT` (ms);
    /// default 30000. The OTLP exporter's own timeout bounds it too (see
    /// [`Config::metrics_export_bound`]).
    pub metric_export_timeout: Duration,
    /// The events' queue and batches (`OTEL_BLRP_*`).
    pub logs_batch: LogsBatch,
    /// `OTEL_SDK_DISABLED=true`: nothing is exported (metrics and events), whatever the
    /// exporters say; sampling, rules, the run report, the sample log and health go on.
    pub sdk_disabled: bool,
    /// Standard `OTEL_*` variables that are set but do not apply to this agent, each with
    /// why; named in one warning at start (see [`OTEL_VARIABLES`]).
    pub otel_not_applied: Vec<(String, String)>,
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

impl OutputTarget {
    /// As written in the setting: the path, or `-` for standard output.
    pub fn as_setting(&self) -> String {
        match self {
            OutputTarget::Stdout => "-".to_string(),
            OutputTarget::Path(p) => p.display().to_string(),
        }
    }
}

/// Format of the sample log, `GPU_SIDECAR_SAMPLE_LOG_FORMAT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleLogFormat {
    /// Comma-separated values with one header line (RFC 4180).
    Csv,
    /// One JSON object per line.
    Jsonl,
}

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
}

/// Where the health endpoint listens (`GPU_SIDECAR_HEALTH_ADDR`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthAddr {
    /// A TCP address and port, such as `0.0.0.0:13134`.
    Tcp(SocketAddr),
    /// A Unix socket file, written `unix:/run/gpu-otel-sidecar/health.sock`: no port at all
    /// (a `hostNetwork` pod's sidecar, whose ports would be the node's).
    Unix(PathBuf),
}

impl std::fmt::Display for HealthAddr {
    /// As written in `GPU_SIDECAR_HEALTH_ADDR`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HealthAddr::Tcp(a) => write!(f, "{a}"),
            HealthAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// The NVIDIA Container Toolkit's variables as the container has them (unset or empty:
/// `None`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolkitEnv {
    /// `NVIDIA_VISIBLE_DEVICES`.
    pub visible_devices: Option<String>,
    /// `NVIDIA_DRIVER_CAPABILITIES`.
    pub driver_capabilities: Option<String>,
}

/// Unix socket paths are at most 107 bytes (`sun_path`).
const UNIX_PATH_MAX: usize = 107;

fn parse_health_addr(v: &str) -> Result<HealthAddr, ConfigError> {
    let bad = || ConfigError::new(S::HEALTH_ADDR.name, v, S::HEALTH_ADDR.accepts);
    match v.strip_prefix("unix:") {
        Some(path) if path.starts_with('/') && path.len() <= UNIX_PATH_MAX => {
            Ok(HealthAddr::Unix(PathBuf::from(path)))
        }
        Some(_) => Err(bad()),
        None => v.parse().map(HealthAddr::Tcp).map_err(|_| bad()),
    }
}

/// Downward API variables and the resource attribute each one sets.
pub const DOWNWARD_API: &[(&str, &str)] = &[
    ("K8S_POD_NAME", resource::K8S_POD_NAME),
    ("K8S_POD_UID", resource::K8S_POD_UID),
    ("K8S_NAMESPACE_NAME", resource::K8S_NAMESPACE_NAME),
    ("K8S_NODE_NAME", resource::K8S_NODE_NAME),
    ("K8S_CONTAINER_NAME", resource::K8S_CONTAINER_NAME),
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
        known::check_names(&vars)?;
        let env = Env(&vars);
        let get = |name: &str| env.get(name);

        let report_file = get(S::REPORT_FILE.name).map(output_target);
        let report_html = match get(S::REPORT_HTML.name) {
            Some("-") => {
                return Err(ConfigError::new(
                    S::REPORT_HTML.name,
                    "-",
                    S::REPORT_HTML.accepts,
                ))
            }
            v => v.map(PathBuf::from),
        };
        let sample_interval =
            parse_duration(S::SAMPLE_INTERVAL.name, env.value(&S::SAMPLE_INTERVAL))?;
        let sample_log = parse_sample_log(&env)?;
        let shutdown_timeout =
            parse_duration(S::SHUTDOWN_TIMEOUT.name, env.value(&S::SHUTDOWN_TIMEOUT))?;
        let slow_intervals = SlowIntervals {
            process: parse_duration(S::PROCESS_INTERVAL.name, env.value(&S::PROCESS_INTERVAL))?,
            gpm: parse_duration(S::GPM_INTERVAL.name, env.value(&S::GPM_INTERVAL))?,
            energy: parse_duration(S::ENERGY_INTERVAL.name, env.value(&S::ENERGY_INTERVAL))?,
            pcie: parse_duration(S::PCIE_INTERVAL.name, env.value(&S::PCIE_INTERVAL))?,
        };
        let metrics_detail = parse_bool(S::METRICS_DETAIL.name, env.value(&S::METRICS_DETAIL))?;
        let devices = parse_devices(env.value(&S::DEVICES))?;
        if devices == DeviceSelection::PodResources
            && (get("K8S_POD_NAME").is_none() || get("K8S_NAMESPACE_NAME").is_none())
        {
            return Err(ConfigError::new(
                S::DEVICES.name,
                "pod-resources",
                "K8S_POD_NAME and K8S_NAMESPACE_NAME to be set too (Downward API), to find this pod's GPUs",
            ));
        }
        let pod_resources_socket = PathBuf::from(env.value(&S::POD_RESOURCES_SOCKET));
        let exit_with_process = get(S::EXIT_WITH_PROCESS.name).map(str::to_string);
        if let Some(name) = &exit_with_process {
            // /proc/<pid>/comm holds at most 15 bytes.
            if name.len() > 15 || name.contains('/') {
                return Err(ConfigError::new(
                    S::EXIT_WITH_PROCESS.name,
                    name,
                    S::EXIT_WITH_PROCESS.accepts,
                ));
            }
        }
        let exit_with_containers = match get(S::EXIT_WITH_CONTAINERS.name) {
            None => false,
            Some(v) => parse_bool(S::EXIT_WITH_CONTAINERS.name, v)?,
        };
        if let (true, Some(name)) = (exit_with_containers, &exit_with_process) {
            return Err(ConfigError::new(
                S::EXIT_WITH_CONTAINERS.name,
                "true",
                format!(
                    "false while {}={name} is set: the agent follows either the pod's other containers or one process name",
                    S::EXIT_WITH_PROCESS.name
                ),
            ));
        }
        let pod_restart_policy = match get(S::POD_RESTART_POLICY.name) {
            None => crate::process_watch::RestartPolicy::Never,
            Some(v) => crate::process_watch::RestartPolicy::parse(v).ok_or_else(|| {
                ConfigError::new(S::POD_RESTART_POLICY.name, v, S::POD_RESTART_POLICY.accepts)
            })?,
        };
        if pod_restart_policy == crate::process_watch::RestartPolicy::Always {
            let rule = if exit_with_containers {
                Some((S::EXIT_WITH_CONTAINERS.name, "true".to_string()))
            } else {
                exit_with_process
                    .as_ref()
                    .map(|n| (S::EXIT_WITH_PROCESS.name, n.clone()))
            };
            if let Some((var, value)) = rule {
                return Err(ConfigError::new(
                    var,
                    &value,
                    format!(
                        "unset while {}=Always: the kubelet restarts every container of such a pod, so a sidecar that ends by itself would be restarted and end again (a crash loop); the sidecar of an Always pod runs as long as the pod",
                        S::POD_RESTART_POLICY.name
                    ),
                ));
            }
        }
        let restart_wait = match env.value(&S::RESTART_WAIT) {
            "kubelet" => crate::process_watch::RestartWait::Kubelet,
            v => crate::process_watch::RestartWait::Fixed(
                parse_duration(S::RESTART_WAIT.name, v).map_err(|_| {
                    ConfigError::new(S::RESTART_WAIT.name, v, S::RESTART_WAIT.accepts)
                })?,
            ),
        };
        let nvml_library = PathBuf::from(env.value(&S::NVML_LIBRARY));
        let proc_root = PathBuf::from(env.value(&S::PROC_ROOT));
        let log_format = match env.value(&S::LOG_FORMAT) {
            "text" => LogFormat::Text,
            "json" => LogFormat::Json,
            v => {
                return Err(ConfigError::new(
                    S::LOG_FORMAT.name,
                    v,
                    S::LOG_FORMAT.accepts,
                ))
            }
        };
        let log_level = env.value(&S::LOG_LEVEL).to_string();
        if !valid_log_filter(&log_level) {
            return Err(ConfigError::new(
                S::LOG_LEVEL.name,
                &log_level,
                S::LOG_LEVEL.accepts,
            ));
        }

        let export_interval = otel::METRIC_EXPORT_INTERVAL.millis(&get)?;
        let exporters = otel::parse_exporters(&get)?;
        let otlp = parse_otlp(&get)?;
        let metric_export_timeout = otel::METRIC_EXPORT_TIMEOUT.millis(&get)?;
        let logs_batch = parse_logs_batch(&get)?;
        let otel_not_applied = otel::not_applied(&vars);
        let health_addr = match env.trimmed(&S::HEALTH_ADDR) {
            Some("off") => None,
            v => Some(parse_health_addr(v.unwrap_or_default())?),
        };
        let price_per_gpu_hour = match env.trimmed(&S::PRICE_PER_GPU_HOUR) {
            None => None,
            Some(v) => match v.parse::<f64>() {
                Ok(p) if p.is_finite() && p >= 0.0 => Some(p),
                _ => {
                    return Err(ConfigError::new(
                        S::PRICE_PER_GPU_HOUR.name,
                        v,
                        S::PRICE_PER_GPU_HOUR.accepts,
                    ))
                }
            },
        };
        let watchdog_timeout = match get(S::WATCHDOG_TIMEOUT.name) {
            None => (sample_interval * 3).max(Duration::from_secs(10)),
            Some(v) => parse_duration(S::WATCHDOG_TIMEOUT.name, v)?,
        };

        let mut resource_attributes = BTreeMap::new();
        for (var, key) in DOWNWARD_API {
            if let Some(v) = get(var) {
                resource_attributes.insert((*key).to_string(), v.to_string());
            }
        }
        let pod_labels = job::parse_pod_labels(env.value(&S::POD_LABELS))?;
        resource_attributes.extend(job::workload_attributes(&vars, &pod_labels)?);
        let mut service_name = None;
        if let Some(v) = get(otel::RESOURCE_ATTRIBUTES.name) {
            for (k, val) in parse_key_values(otel::RESOURCE_ATTRIBUTES.name, v, false)? {
                if k == resource::SERVICE_NAME {
                    service_name = Some(val);
                } else {
                    resource_attributes.insert(k, val);
                }
            }
        }
        if let Some(v) = get(otel::SERVICE_NAME.name) {
            service_name = Some(v.to_string());
        }

        Ok(Config {
            sample_interval,
            export_interval,
            slow_intervals,
            metrics_detail,
            devices,
            pod_resources_socket,
            exit_with_process,
            proc_root,
            node: false,
            exit_with_containers,
            pod_restart_policy,
            restart_wait,
            in_kubernetes: get("KUBERNETES_SERVICE_HOST").is_some()
                || get("K8S_POD_NAME").is_some(),
            toolkit: ToolkitEnv {
                visible_devices: get("NVIDIA_VISIBLE_DEVICES").map(str::to_string),
                driver_capabilities: get("NVIDIA_DRIVER_CAPABILITIES").map(str::to_string),
            },
            sees_all_node_gpus: get("NVIDIA_VISIBLE_DEVICES") == Some("all"),
            nvml_library,
            log_format,
            log_level,
            shutdown_timeout,
            metrics_exporter: exporters.metrics,
            logs_exporter: exporters.logs,
            otlp,
            health_addr,
            watchdog_timeout,
            service_name: service_name
                .unwrap_or_else(|| otel::SERVICE_NAME.default_word().to_string()),
            resource_attributes,
            report_file,
            report_html,
            sample_log,
            rules: parse_rules(&get)?,
            metric_export_timeout,
            logs_batch,
            sdk_disabled: exporters.sdk_disabled,
            otel_not_applied,
            price_per_gpu_hour,
        })
    }
}

/// The variables as the settings read them: an empty variable counts as unset.
struct Env<'a>(&'a BTreeMap<String, String>);

impl<'a> Env<'a> {
    /// The value of `name`; `None` when unset or empty.
    fn get(&self, name: &str) -> Option<&'a str> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// The value of a row of the settings table, or its default when unset; `""` for a row
    /// without one (`settings_table_rows_are_consistent` reads every row this way unset).
    fn value(&self, s: &Setting) -> &'a str {
        self.get(s.name).or(s.default_value()).unwrap_or_default()
    }

    /// The value of a row, trimmed, or its default when unset or blank.
    fn trimmed(&self, s: &Setting) -> Option<&'a str> {
        self.get(s.name)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .or(s.default_value())
    }
}

/// `GPU_SIDECAR_SAMPLE_LOG*`. The format and size are validated even when the log is off.
fn parse_sample_log(env: &Env<'_>) -> Result<Option<SampleLogConfig>, ConfigError> {
    let format = match env.value(&S::SAMPLE_LOG_FORMAT) {
        "csv" => SampleLogFormat::Csv,
        "jsonl" => SampleLogFormat::Jsonl,
        v => {
            return Err(ConfigError::new(
                S::SAMPLE_LOG_FORMAT.name,
                v,
                S::SAMPLE_LOG_FORMAT.accepts,
            ))
        }
    };
    let v = env.value(&S::SAMPLE_LOG_MAX_BYTES);
    let max_bytes = match v.trim().parse::<bytesize::ByteSize>() {
        Ok(b) if b.as_u64() > 0 => b.as_u64(),
        _ => {
            return Err(ConfigError::new(
                S::SAMPLE_LOG_MAX_BYTES.name,
                v,
                S::SAMPLE_LOG_MAX_BYTES.accepts,
            ))
        }
    };
    Ok(env.get(S::SAMPLE_LOG.name).map(|v| SampleLogConfig {
        target: output_target(v),
        format,
        max_bytes,
    }))
}

#[cfg(test)]
mod tests;
