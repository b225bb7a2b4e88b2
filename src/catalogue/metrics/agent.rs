//! The metrics no [`DeviceSample`](crate::sampling::DeviceSample) gives, counted by the
//! agent itself: those recorded as things happen ([`RECORDED`]: XIDs, sample durations,
//! alerts, webhook admissions) and the self-metrics read at each export ([`SELF_METRICS`]:
//! NVML errors, stuck NVML calls, export outcomes).
//!
//! Two shapes of metric definition remain, for two kinds of value: a GPU metric
//! ([`MetricDef`](super::MetricDef)) carries the mapping from a sample and the group of NVML
//! calls that sets its cadence; an agent metric ([`AgentMetricDef`]) has neither (its value
//! is counted by the code named in `source`), so it is a plain description.

/// Instrument kind of an agent metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentInstrument {
    /// Monotonic counter.
    Counter,
    /// Explicit-bucket histogram.
    Histogram,
    /// Gauge: the current value.
    Gauge,
}

impl AgentInstrument {
    /// Name used in `docs/metrics.md`.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentInstrument::Counter => "counter",
            AgentInstrument::Histogram => "histogram",
            AgentInstrument::Gauge => "gauge",
        }
    }
}

/// A metric the agent counts itself rather than reads from a snapshot: recorded as things
/// happen ([`crate::telemetry::metrics::recorded`]) or read at each export
/// ([`crate::telemetry::metrics::self_metrics`]); exported by [`crate::telemetry::metrics::encode`],
/// documented in `docs/metrics.md`.
#[derive(Debug, Clone, Copy)]
pub struct AgentMetricDef {
    /// OTel metric name.
    pub name: &'static str,
    /// Instrument kind.
    pub instrument: AgentInstrument,
    /// UCUM unit.
    pub unit: &'static str,
    /// One-line description.
    pub description: &'static str,
    /// Attribute keys, with their values.
    pub attributes: &'static str,
    /// Where the value comes from.
    pub source: &'static str,
}

/// `nvidia.gpu.xid.errors`: one per XID event.
pub static XID_ERRORS: AgentMetricDef = AgentMetricDef {
    name: "nvidia.gpu.xid.errors",
    instrument: AgentInstrument::Counter,
    unit: "{error}",
    description: "XID critical errors reported by the driver since the agent started; each also emits an `nvidia.gpu.xid` event naming the error.",
    attributes: "the device attributes (the MIG device when NVML names its GPU instance); `nvidia.gpu.xid.code` (int)",
    source: "`nvmlEventSetWait_v2` (drivers before R450: `nvmlEventSetWait`, no MIG attribution) on an event set registered for `nvmlEventTypeXidCriticalError` (`eventData` = the XID), thread `nvml-events`",
};

/// `nvidia.gpu.xid.last_seen`: when each XID code was last reported on each GPU.
pub static XID_LAST_SEEN: AgentMetricDef = AgentMetricDef {
    name: "nvidia.gpu.xid.last_seen",
    instrument: AgentInstrument::Gauge,
    unit: "s",
    description: "Unix time (seconds) of the last report of the XID code on the device, born with the code's first report (one series per GPU and code seen, as `nvidia.gpu.xid.errors`). It changes at every report, in every run of the agent, where a count born at 1 again after a restart does not: the shipped `GPUXidError` rule reads it ([First occurrences](events.md#first-occurrences)).",
    attributes: "as `nvidia.gpu.xid.errors`",
    source: "the time the `nvml-events` thread received the XID from `nvmlEventSetWait_v2` (NVML's events carry no time)",
};

/// `gpu_sidecar.sample.duration`: the agent's own cost.
pub static SAMPLE_DURATION: AgentMetricDef = AgentMetricDef {
    name: "gpu_sidecar.sample.duration",
    instrument: AgentInstrument::Histogram,
    unit: "s",
    description: "Time the NVML calls of one sample took, over all devices (the agent's own cost); with `GPU_SIDECAR_METRICS_DETAIL=true`, one group of calls, each time the group ran.",
    attributes: "none by default; with `GPU_SIDECAR_METRICS_DETAIL=true` `gpu_sidecar.sample.group` = `static` | `fast` | `energy` | `pcie` | `process` | `gpm`",
    source: "wall-clock time around the groups' calls on the `nvml-sampler` thread (a session's device listing, `static`, counts in its first sample; the groups and when each runs: [Sampling schedule](sampling.md#sampling-schedule))",
};

/// `nvidia.gpu.alerts`: one per alert transition of the rules engine.
pub static ALERTS: AgentMetricDef = AgentMetricDef {
    name: "nvidia.gpu.alerts",
    instrument: AgentInstrument::Counter,
    unit: "{alert}",
    description: "Alert transitions of the agent's rules: 1 per firing, 1 per resolution (see docs/events.md).",
    attributes: "`nvidia.gpu.alert.rule` = `memory_near_full` | `memory_preallocated` | `memory_leak` | `temperature_high` | `clocks_power_capped` | `clocks_slowdown` | `input_starvation` | `utilization_imbalance` | `tensor_cores_idle` | `memory_bound` | `gpu_lost` | `xid`; `nvidia.gpu.alert.state` = `firing` | `resolved`; `nvidia.gpu.alert.severity` = `info` | `warning` | `critical`; `hw.id` (the GPU the alert names)",
    source: "the rules engine (`src/rules/`), at each transition",
};

/// `gpu_sidecar.webhook.admissions`: AdmissionReviews answered, by outcome
/// ([`crate::webhook::metrics::OUTCOME`]).
pub static ADMISSIONS: AgentMetricDef = AgentMetricDef {
    name: "gpu_sidecar.webhook.admissions",
    instrument: AgentInstrument::Counter,
    unit: "{admission}",
    description: "AdmissionReviews the admission webhook answered since it started, by what it did with the pod (exported by the `webhook` command's own process, not by sidecars).",
    attributes: "`gpu_sidecar.webhook.outcome` = `injected` | `already_injected` | `opted_out` | `not_requested` | `no_gpu` | `invalid_quantity` | `ambiguous_container` | `unknown_container` | `visibility_mismatch` | `volume_conflict` | `ignored` | `invalid`; `gpu_sidecar.webhook.dry_run` (`true` for a dry run such as `kubectl apply --dry-run=server`, which creates no pod; absent for a body that is not a review)",
    source: "the `webhook` command (`src/webhook/`), one per `POST /mutate` or `/mutate/namespace` answered",
};

/// `gpu_sidecar.webhook.certificate.expiry`: when the webhook's serving certificate expires.
pub static CERTIFICATE_EXPIRY: AgentMetricDef = AgentMetricDef {
    name: "gpu_sidecar.webhook.certificate.expiry",
    instrument: AgentInstrument::Gauge,
    unit: "s",
    description: "Unix time (seconds) at which the certificate the admission webhook serves expires (the earliest `notAfter` of its chain); absent while it serves none. One series per replica (exported by the `webhook` command's own process). An alert compares it with `time()`: the shipped rules `GPUSidecarWebhookCertificateExpiring` and `GPUSidecarWebhookCertificateExpired`.",
    attributes: "none",
    source: "the served certificate's `notAfter` (x509-cert), read when it is loaded: its files (`GPU_SIDECAR_WEBHOOK_TLS_CERT`) or its Secret (`GPU_SIDECAR_WEBHOOK_TLS_SECRET`)",
};

/// `gpu_sidecar.webhook.certificate.renewal`: when the webhook renews the certificate it keeps.
pub static CERTIFICATE_RENEWAL: AgentMetricDef = AgentMetricDef {
    name: "gpu_sidecar.webhook.certificate.renewal",
    instrument: AgentInstrument::Gauge,
    unit: "s",
    description: "Unix time (seconds) at which the certificate the admission webhook serves is due for renewal: two thirds of the way from its `notBefore` to its `notAfter`. Only for a certificate the webhook keeps itself (`GPU_SIDECAR_WEBHOOK_TLS_SECRET`), which it renews then; absent for certificate files, renewed by whoever writes them. A replica still serving a certificate past this time has not taken the renewed one: the shipped rule `GPUSidecarWebhookCertificateNotRenewed`.",
    attributes: "none",
    source: "the served certificate's `notBefore` and `notAfter` (x509-cert), read when it is loaded from the Secret",
};

/// Every recorded metric, in documentation order.
pub static RECORDED: &[&AgentMetricDef] = &[
    &XID_ERRORS,
    &XID_LAST_SEEN,
    &SAMPLE_DURATION,
    &ALERTS,
    &ADMISSIONS,
    &CERTIFICATE_EXPIRY,
    &CERTIFICATE_RENEWAL,
];

/// `gpu_sidecar.nvml.errors`: errors NVML answered, by call and code.
pub static NVML_ERRORS: AgentMetricDef = AgentMetricDef {
    name: "gpu_sidecar.nvml.errors",
    instrument: AgentInstrument::Counter,
    unit: "{error}",
    description: "Errors NVML answered since start. A field that answers NOT_SUPPORTED is asked (and counted) once per GPU and NVML session; a lost GPU is probed (and counted) once per tick.",
    attributes: "`nvidia.nvml.call` (C function, e.g. `nvmlDeviceGetPowerUsage`, `nvmlInit_v2`), `error.type` (`NVML_ERROR_*` name)",
    source: "every NVML call that answered an error, on the `nvml-sampler` and `nvml-events` threads; read at each export",
};

/// `gpu_sidecar.nvml.stuck`: NVML steps that ran past the watchdog bound.
pub static NVML_STUCK: AgentMetricDef = AgentMetricDef {
    name: "gpu_sidecar.nvml.stuck",
    instrument: AgentInstrument::Counter,
    unit: "{call}",
    description: "NVML steps found running past GPU_SIDECAR_WATCHDOG_TIMEOUT (for the event watcher: past its wait's own timeout plus that bound) since start, one per episode: a driver call that does not return. Logged once each; readiness is false meanwhile.",
    attributes: "`thread.name` (`nvml-sampler` or `nvml-events`), `gpu_sidecar.nvml.step` (the sampler's step, e.g. `sampling tick`, or the watcher's call, e.g. `nvmlEventSetWait_v2`)",
    source: "the watchdog over the NVML threads; read at each export",
};

/// `gpu_sidecar.export.failures`: failed metric exports.
pub static EXPORT_FAILURES: AgentMetricDef = AgentMetricDef {
    name: "gpu_sidecar.export.failures",
    instrument: AgentInstrument::Counter,
    unit: "{export}",
    description: "Metric exports that failed since start (after the exporter's own retries); the data of a failed export is dropped, cumulative counters stay continuous. Absent until the first failure.",
    attributes: "none",
    source: "the metric exporter's answer to each export; read at each export",
};

/// `gpu_sidecar.export.last_success`: time of the last successful metric export.
pub static EXPORT_LAST_SUCCESS: AgentMetricDef = AgentMetricDef {
    name: "gpu_sidecar.export.last_success",
    instrument: AgentInstrument::Gauge,
    unit: "s",
    description:
        "Unix time (seconds) of the last successful metric export; absent until one succeeded.",
    attributes: "none",
    source: "the metric exporter's answer to each export; read at each export",
};

/// `gpu_sidecar.events.dropped`: events the outbox could not hold or deliver.
pub static EVENTS_DROPPED: AgentMetricDef = AgentMetricDef {
    name: "gpu_sidecar.events.dropped",
    instrument: AgentInstrument::Counter,
    unit: "{event}",
    description: "Events (log records: alerts, XID and ECC errors, the run report) dropped since start: the oldest, when the queue (`OTEL_BLRP_MAX_QUEUE_SIZE`) was full while the collector did not take them; those the collector refused for good; those still queued at the shutdown bound. The first drop of an outage is logged once. Absent until the first drop.",
    attributes: "none",
    source: "the events' queue (`src/telemetry/logs/outbox.rs`), as it drops them",
};

/// Every self-metric, in documentation order.
pub static SELF_METRICS: &[&AgentMetricDef] = &[
    &NVML_ERRORS,
    &NVML_STUCK,
    &EXPORT_FAILURES,
    &EXPORT_LAST_SUCCESS,
    &EVENTS_DROPPED,
];
