//! The one table of alert rules: name, `event.name`, severity, settings with their defaults,
//! the condition in words, the attributes the record carries, and the hint.
//!
//! Configuration ([`crate::config`] reads `GPU_SIDECAR_RULE_<ENV>_*` for each row), the
//! engine ([`super::engine::Engine::new`]), the records ([`super::Rules`]) and
//! `docs/events.md` ([`markdown`], checked by `tests/docs/events.rs`) all follow [`RULES`].

use std::time::Duration;

use opentelemetry::logs::Severity;

use crate::catalogue::alert_values::{self as v, AlertValue};
use crate::catalogue::xid;

pub use super::id::{Hold, RuleId, RuleSettings};
use super::preallocation::PoolParams;
use super::rule::Build;
use super::{clocks, health, memory, profiling, workload};

impl RuleId {
    /// The rule's row in [`RULES`].
    pub fn spec(self) -> &'static RuleSpec {
        RULES
            .iter()
            .find(|r| r.id == self)
            .expect("every RuleId has a row in RULES")
    }

    /// The row's DURATION default: what a rule's constructor falls back on when its
    /// settings hold none (they always do when read from the environment).
    ///
    /// # Panics
    /// When the row's hold is not a duration (a mistake in `RULES`, caught by the tests).
    pub fn default_duration(self) -> Duration {
        match self.spec().hold {
            HoldSpec::Duration(d) => d,
            other => panic!("{self:?}'s row holds {other:?}, not a duration"),
        }
    }

    /// The row's THRESHOLD default, in its unit (see [`RuleId::default_duration`]).
    ///
    /// # Panics
    /// When the row has no threshold.
    pub fn default_threshold(self) -> f64 {
        self.spec()
            .threshold
            .unwrap_or_else(|| panic!("{self:?}'s row has no threshold"))
            .default
    }

    /// The row's second threshold's default, in its unit.
    ///
    /// # Panics
    /// When the row has no second threshold.
    pub fn default_second_threshold(self) -> f64 {
        self.spec()
            .second_threshold
            .unwrap_or_else(|| panic!("{self:?}'s row has no second threshold"))
            .spec
            .default
    }
}

impl Default for PoolParams {
    /// The `memory_preallocated` rule's defaults.
    fn default() -> Self {
        let id = RuleId::MemoryPreallocated;
        Self::from_rule(id.default_threshold(), id.default_duration())
    }
}

/// How bad it is; the record's severity and the `nvidia.gpu.alert.severity` attribute:
/// declared with its values in the attribute catalogue.
pub use crate::catalogue::attributes::AlertSeverity;

impl AlertSeverity {
    /// OTel log severity of a firing record (a resolved record is always `INFO`).
    pub fn otel(self) -> Severity {
        match self {
            AlertSeverity::Info => Severity::Info,
            AlertSeverity::Warning => Severity::Warn,
            AlertSeverity::Critical => Severity::Fatal,
        }
    }
}

/// A rule's threshold setting (`GPU_SIDECAR_RULE_<ENV>_THRESHOLD`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThresholdSpec {
    /// Default value.
    pub default: f64,
    /// Unit in words, for the docs and the error message (e.g. `percent of total memory`).
    pub unit: &'static str,
    /// Smallest accepted value (exclusive when `min_exclusive`).
    pub min: f64,
    /// Whether `min` itself is refused.
    pub min_exclusive: bool,
    /// Largest accepted value (inclusive).
    pub max: f64,
    /// Whether a trailing `%` is accepted (percent values).
    pub percent: bool,
}

/// A rule's second threshold (`GPU_SIDECAR_RULE_<ENV>_<suffix>`), for rules judged on two
/// readings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NamedThreshold {
    /// The setting's suffix, e.g. `UTILIZATION`.
    pub suffix: &'static str,
    /// Its default, unit and bounds.
    pub spec: ThresholdSpec,
}

/// A rule's hold setting: which variable sets it and its default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldSpec {
    /// No setting: fires at the first sample.
    Immediate,
    /// `GPU_SIDECAR_RULE_<ENV>_DURATION` (a duration with a unit).
    Duration(Duration),
    /// `GPU_SIDECAR_RULE_<ENV>_SAMPLES` (consecutive samples, at least 1).
    Samples(u32),
}

/// One row of the rule table.
#[derive(Debug, Clone, Copy)]
pub struct RuleSpec {
    /// Identity.
    pub id: RuleId,
    /// Short name, the `nvidia.gpu.alert.rule` attribute value (e.g. `memory_near_full`).
    pub name: &'static str,
    /// Middle of the setting names: `GPU_SIDECAR_RULE_<ENV>_ENABLED`, ...
    pub env: &'static str,
    /// Stable `event.name` of the records: `nvidia.gpu.alert.<name>`.
    pub event_name: &'static str,
    /// Severity of a firing record.
    pub severity: AlertSeverity,
    /// Threshold setting, if the rule has one.
    pub threshold: Option<ThresholdSpec>,
    /// A second threshold setting, if the rule has one.
    pub second_threshold: Option<NamedThreshold>,
    /// Hold setting.
    pub hold: HoldSpec,
    /// When it fires and when it resolves, in words (for `docs/events.md`).
    pub condition: &'static str,
    /// The values the record carries besides those on every alert record (for
    /// `docs/events.md`; the rule's code builds them from these).
    pub values: &'static [AlertValue],
    /// One sentence saying what to do, in the record's body.
    pub hint: &'static str,
    /// Builds the rule from its settings and what the rules it defers to are set to: the
    /// engine calls it for each enabled rule ([`super::engine::Engine::new`]), so a new rule
    /// is this row and its judgement in its family file.
    pub(crate) build: Build,
}

impl RuleSpec {
    /// `GPU_SIDECAR_RULE_<ENV>_<suffix>`.
    pub fn var(&self, suffix: &str) -> String {
        format!(
            "{}RULE_{}_{suffix}",
            crate::config::settings::PREFIX,
            self.env
        )
    }

    /// The setting suffixes this rule reads: `ENABLED`, and `THRESHOLD`, the second
    /// threshold's, `DURATION` or `SAMPLES` where it has them.
    pub fn setting_suffixes(&self) -> Vec<&'static str> {
        let mut v = vec!["ENABLED"];
        if self.threshold.is_some() {
            v.push("THRESHOLD");
        }
        if let Some(t) = self.second_threshold {
            v.push(t.suffix);
        }
        match self.hold {
            HoldSpec::Immediate => {}
            HoldSpec::Duration(_) => v.push("DURATION"),
            HoldSpec::Samples(_) => v.push("SAMPLES"),
        }
        v
    }

    /// [`RuleSpec::values`] as the docs list them: `` `key` (note), … ``.
    pub fn values_doc(&self) -> String {
        let docs: Vec<String> = self.values.iter().map(|v| v.doc()).collect();
        docs.join(", ")
    }

    /// The hold given by the defaults.
    pub fn default_hold(&self) -> Hold {
        match self.hold {
            HoldSpec::Immediate => Hold::Immediate,
            HoldSpec::Duration(d) => Hold::Duration(d),
            HoldSpec::Samples(n) => Hold::Samples(n),
        }
    }
}

const fn percent(default: f64, unit: &'static str) -> Option<ThresholdSpec> {
    Some(ThresholdSpec {
        default,
        unit,
        min: 0.0,
        min_exclusive: true,
        max: 100.0,
        percent: true,
    })
}

/// Every rule, in documentation order.
pub static RULES: &[RuleSpec] = &[
    RuleSpec {
        id: RuleId::MemoryNearFull,
        build: memory::NearFull::build,
        name: "memory_near_full",
        env: "MEMORY_NEAR_FULL",
        event_name: "nvidia.gpu.alert.memory_near_full",
        severity: AlertSeverity::Warning,
        threshold: percent(95.0, "percent of total GPU memory"),
        second_threshold: None,
        hold: HoldSpec::Duration(Duration::from_secs(10)),
        condition: "Memory used (`nvmlDeviceGetMemoryInfo_v2.used / .total`) at or above THRESHOLD for DURATION. Not judged while the memory is a framework's preallocated pool (`memory_preallocated`, when that rule is enabled): only memory that grows past the pool counts. Resolves once it has been below for DURATION.",
        values: &[v::MEMORY_UTILIZATION, v::MEMORY_USAGE, v::MEMORY_LIMIT],
        hint: "The next allocation may fail with out-of-memory: reduce the batch size, or let the framework grow its memory instead of preallocating (TF_FORCE_GPU_ALLOW_GROWTH=true, PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True).",
    },
    RuleSpec {
        id: RuleId::MemoryPreallocated,
        build: memory::Preallocated::build,
        name: "memory_preallocated",
        env: "MEMORY_PREALLOCATED",
        event_name: "nvidia.gpu.alert.memory_preallocated",
        severity: AlertSeverity::Info,
        threshold: percent(70.0, "percent of total GPU memory taken at the jump"),
        second_threshold: None,
        hold: HoldSpec::Duration(Duration::from_secs(60)),
        condition: "A compute process appears (`nvmlDeviceGetComputeRunningProcesses_v3`: listed now, not at the previous sample; processes already running when the agent starts do not count) and, at that sample, the next one, or within DURATION/6 of it (10 s at the default), memory used (`nvmlDeviceGetMemoryInfo_v2`) reaches THRESHOLD of total from below: a framework's pool (TensorFlow maps nearly all memory at start unless memory growth is on, JAX 75 %). Fires once the memory has stayed within 1 % of total of that level for DURATION. While it does, `memory_near_full` does not judge the GPU (NVML sees the pool, not how full it is). Resolves at the first sample where the memory leaves that level: it grew (then `memory_near_full` and `memory_leak` judge it again) or the pool was released.",
        values: &[v::APPEARED_PID, v::MEMORY_JUMP_TIME, v::MEMORY_UTILIZATION, v::MEMORY_USAGE, v::MEMORY_LIMIT],
        hint: "Turn memory growth on so that near-full and leaks can be judged from outside: TF_FORCE_GPU_ALLOW_GROWTH=true (or tf.config.experimental.set_memory_growth) for TensorFlow, XLA_PYTHON_CLIENT_PREALLOCATE=false for JAX; PyTorch's caching allocator tells how full its pool is (torch.cuda.memory_allocated against memory_reserved).",
    },
    RuleSpec {
        id: RuleId::MemoryLeak,
        build: memory::Leak::build,
        name: "memory_leak",
        env: "MEMORY_LEAK",
        event_name: "nvidia.gpu.alert.memory_leak",
        severity: AlertSeverity::Warning,
        threshold: Some(ThresholdSpec {
            default: 1.0,
            unit: "percent of total GPU memory gained over DURATION",
            min: 0.0,
            min_exclusive: true,
            max: 100.0,
            percent: true,
        }),
        second_threshold: None,
        hold: HoldSpec::Duration(Duration::from_secs(600)),
        condition: "Memory used rising without coming back for DURATION: at every sample the Theil-Sen slope of the last DURATION/5 is at least half the rate THRESHOLD per DURATION (so a plateau, a drop or a sawtooth breaks it), and over the whole last DURATION memory grew by at least THRESHOLD percent of total (Theil-Sen slope x DURATION). The slopes are fitted to the means of DURATION/120 buckets (5 s at the default), again each time a bucket closes, so the cost per sample stays flat however long the run. Resolves once it has not been rising for DURATION/5.",
        values: &[v::MEMORY_GROWTH_RATE, v::MEMORY_GROWTH, v::MEMORY_TIME_TO_FULL, v::MEMORY_USAGE, v::MEMORY_LIMIT],
        hint: "Something keeps GPU memory across steps: look for tensors kept in Python lists or histories (losses without .item(), accumulated outputs), caches that grow, or graphs rebuilt every step.",
    },
    RuleSpec {
        id: RuleId::TemperatureHigh,
        build: clocks::TemperatureHigh::build,
        name: "temperature_high",
        env: "TEMPERATURE_HIGH",
        event_name: "nvidia.gpu.alert.temperature_high",
        severity: AlertSeverity::Warning,
        threshold: Some(ThresholdSpec {
            default: 85.0,
            unit: "°C, GPU die",
            min: 0.0,
            min_exclusive: true,
            max: 150.0,
            percent: false,
        }),
        second_threshold: None,
        hold: HoldSpec::Samples(3),
        condition: "GPU die temperature (`nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)`) at or above THRESHOLD on SAMPLES consecutive samples. Resolves after SAMPLES consecutive samples below.",
        values: &[v::TEMPERATURE, v::TEMPERATURE_MEMORY],
        hint: "The card will slow its clocks to protect itself: check the node's cooling and airflow (fans, blocked inlets, neighbouring hot cards).",
    },
    RuleSpec {
        id: RuleId::ClocksPowerCapped,
        build: clocks::PowerCapped::build,
        name: "clocks_power_capped",
        env: "CLOCKS_POWER_CAPPED",
        event_name: "nvidia.gpu.alert.clocks_power_capped",
        severity: AlertSeverity::Info,
        threshold: None,
        second_threshold: None,
        hold: HoldSpec::Duration(Duration::from_secs(30)),
        condition: "Clock-event reason `sw_power_cap` (`nvmlDeviceGetCurrentClocksEventReasons` bit 0x4) set for DURATION. Resolves once it has been clear for DURATION.",
        values: &[v::CLOCKS_EVENT_REASONS, v::POWER, v::POWER_LIMIT],
        hint: "The card is working at its power limit, which is normal under full load; it only costs speed if the limit was lowered (compare with the board's default limit).",
    },
    RuleSpec {
        id: RuleId::ClocksSlowdown,
        build: clocks::Slowdown::build,
        name: "clocks_slowdown",
        env: "CLOCKS_SLOWDOWN",
        event_name: "nvidia.gpu.alert.clocks_slowdown",
        severity: AlertSeverity::Warning,
        threshold: None,
        second_threshold: None,
        hold: HoldSpec::Duration(Duration::from_secs(30)),
        condition: "Any of the clock-event reasons `hw_slowdown`, `sw_thermal_slowdown`, `hw_thermal_slowdown`, `hw_power_brake_slowdown` set for DURATION (the same set that makes `hw.status` `degraded`). Resolves once all have been clear for DURATION.",
        values: &[v::CLOCKS_EVENT_REASONS, v::TEMPERATURE, v::POWER],
        hint: "The card runs slower than it can because of heat or a hardware slowdown signal: check cooling, the power supply and the node's health (nvidia-smi -q -d PERFORMANCE).",
    },
    RuleSpec {
        id: RuleId::InputStarvation,
        build: workload::Starvation::build,
        name: "input_starvation",
        env: "INPUT_STARVATION",
        event_name: "nvidia.gpu.alert.input_starvation",
        severity: AlertSeverity::Warning,
        threshold: percent(20.0, "percent GPU utilization"),
        second_threshold: None,
        hold: HoldSpec::Duration(Duration::from_secs(120)),
        condition: "GPU utilization (`nvmlDeviceGetUtilizationRates.gpu`) below THRESHOLD for DURATION while a compute process holds GPU memory (`nvmlDeviceGetComputeRunningProcesses_v3`: a process listed with used memory above 0 or unknown). Never fires when the process list cannot be read. Resolves once that has not been the case for DURATION.",
        values: &[v::UTILIZATION, v::PROCESS_COUNT, v::PROCESS_MEMORY, v::MEMORY_USAGE],
        hint: "The GPU waits for data: prefetch and parallelize the input pipeline (tf.data .prefetch(tf.data.AUTOTUNE) and num_parallel_calls, or DataLoader num_workers and pin_memory), and move preprocessing off the training step.",
    },
    RuleSpec {
        id: RuleId::UtilizationImbalance,
        build: workload::Imbalance::build,
        name: "utilization_imbalance",
        env: "UTILIZATION_IMBALANCE",
        event_name: "nvidia.gpu.alert.utilization_imbalance",
        severity: AlertSeverity::Warning,
        threshold: percent(50.0, "percentage points between the busiest and the idlest GPU"),
        second_threshold: None,
        hold: HoldSpec::Duration(Duration::from_secs(120)),
        condition: "Among the GPUs this agent reads (the pod's), at least two answering, every one with a compute process holding memory: busiest minus idlest utilization at or above THRESHOLD points for DURATION. One alert for the pod; its `hw.id` is the idlest GPU when it fired. Resolves once that has not been the case for DURATION.",
        values: &[v::UTILIZATION_MAX, v::UTILIZATION_MIN, v::UTILIZATION_SPREAD, v::BUSIEST_HW_ID, v::HW_IDS, v::UTILIZATIONS],
        hint: "Some GPUs wait for the others: check that the distribution strategy gives every replica the same work (uneven shards or batch sizes, one rank doing extra work such as evaluation or checkpointing).",
    },
    RuleSpec {
        id: RuleId::TensorCoresIdle,
        build: profiling::TensorCoresIdle::build,
        name: "tensor_cores_idle",
        env: "TENSOR_CORES_IDLE",
        event_name: "nvidia.gpu.alert.tensor_cores_idle",
        severity: AlertSeverity::Info,
        threshold: percent(10.0, "percent of the time the tensor pipes are active"),
        second_threshold: Some(NamedThreshold {
            suffix: "UTILIZATION",
            spec: ThresholdSpec {
                default: 90.0,
                unit: "percent GPU utilization",
                min: 0.0,
                min_exclusive: true,
                max: 100.0,
                percent: true,
            },
        }),
        hold: HoldSpec::Duration(Duration::from_secs(300)),
        condition: "Judged on each GPM window (`GPU_SIDECAR_GPM_INTERVAL`; GPUs with GPM, Hopper and newer; the judgement holds until the next window): GPU utilization (`nvmlDeviceGetUtilizationRates.gpu`, mean of the window's samples) at or above UTILIZATION while the tensor pipes (`NVML_GPM_METRIC_ANY_TENSOR_UTIL`) are active less than THRESHOLD of the time, for DURATION; a window that `memory_bound` would call memory-bound does not count (the more specific diagnosis). Resolves once that has not been the case for DURATION. Never fires on a GPU without GPM, where GPM does not answer tensor activity, or where NVML gives no utilization (MIG devices and GPUs in MIG mode).",
        values: &[v::UTILIZATION, v::TENSOR_ACTIVITY, v::TENSOR_ACTIVITY_HMMA, v::SM_ACTIVITY, v::PIPE_ACTIVITY_FP32, v::DRAM_ACTIVITY, v::GPM_WINDOW],
        hint: "Let the tensor cores do the math: mixed precision (bf16/fp16 autocast, tf.keras.mixed_precision, or TF32 for fp32 matmuls with torch.set_float32_matmul_precision('high')), larger batches, and fused kernels (torch.compile, XLA) instead of many small element-wise ones.",
    },
    RuleSpec {
        id: RuleId::MemoryBound,
        build: profiling::MemoryBound::build,
        name: "memory_bound",
        env: "MEMORY_BOUND",
        event_name: "nvidia.gpu.alert.memory_bound",
        severity: AlertSeverity::Info,
        threshold: percent(80.0, "percent of the peak DRAM bandwidth"),
        second_threshold: Some(NamedThreshold {
            suffix: "SM_ACTIVITY",
            spec: ThresholdSpec {
                default: 50.0,
                unit: "percent SM activity",
                min: 0.0,
                min_exclusive: true,
                max: 100.0,
                percent: true,
            },
        }),
        hold: HoldSpec::Duration(Duration::from_secs(300)),
        condition: "Judged on each GPM window (as `tensor_cores_idle`): DRAM bandwidth (`NVML_GPM_METRIC_DRAM_BW_UTIL`, share of the peak) at or above THRESHOLD while SM activity (`NVML_GPM_METRIC_SM_UTIL`) is below SM_ACTIVITY, for DURATION. Resolves once that has not been the case for DURATION. Never fires on a GPU without GPM. A kernel that streams memory through every SM (SM activity high) is not caught: DRAM activity alone near its peak says so (`nvidia.gpu.dram.activity`).",
        values: &[v::DRAM_ACTIVITY, v::SM_ACTIVITY, v::SM_OCCUPANCY, v::TENSOR_ACTIVITY, v::UTILIZATION, v::GPM_WINDOW],
        hint: "Move fewer bytes per step: fuse element-wise kernels (torch.compile, XLA), drop needless copies, dtype casts and .contiguous() calls, use bf16 to halve the traffic, and keep data on the GPU instead of reloading it.",
    },
    RuleSpec {
        id: RuleId::GpuLost,
        build: health::GpuLost::build,
        name: "gpu_lost",
        env: "GPU_LOST",
        event_name: "nvidia.gpu.alert.gpu_lost",
        severity: AlertSeverity::Critical,
        threshold: None,
        second_threshold: None,
        hold: HoldSpec::Immediate,
        condition: "NVML answers `NVML_ERROR_GPU_IS_LOST` or `NVML_ERROR_RESET_REQUIRED` for the GPU (`hw.status` `failed`). Fires at the first such sample (its readings are the last ones taken before it was lost); resolves at the first sample where it answers again.",
        values: &[v::LOST_GPU_INDEX],
        hint: "The GPU has fallen off the bus or needs a reset; the job on it cannot go on: drain the node, reset or replace the GPU, and check the kernel log for XID 79.",
    },
    RuleSpec {
        id: RuleId::Xid,
        build: health::xid,
        name: "xid",
        env: "XID",
        event_name: "nvidia.gpu.alert.xid",
        severity: AlertSeverity::Critical,
        threshold: None,
        second_threshold: None,
        hold: HoldSpec::Duration(Duration::from_secs(300)),
        condition: "An XID error reported for the GPU by the NVML event watcher (`nvmlEventSetWait`, `nvmlEventTypeXidCriticalError`). Fires at the first report of an XID code on a GPU; repeats of that code while firing are counted, not re-sent. Resolves once that code has not been reported for DURATION.",
        values: &[v::XID, v::XID_COUNT, v::XID_GPU_INSTANCE, v::XID_COMPUTE_INSTANCE],
        hint: "See the XID's meaning in NVIDIA's XID catalogue; the body says what the common ones mean.",
    },
];

/// What each reading behind the profiling rules and the run report means, for
/// `docs/events.md`.
const READINGS: &str = "\n## Reading the profiling figures\n\n\
Utilization is what `nvidia-smi` shows; the others come from GPM (GPU Performance Monitoring, \
Hopper and newer: `nvidia.gpu.*` metrics, the `tensor_cores_idle` and `memory_bound` rules and \
the run report's means). As an example, the H200 these were checked on, running two bf16 \
training jobs, read utilization 1.0, SM activity 0.88, tensor (HMMA) activity 0.82 and DRAM \
activity 0.17: busy, and busy with the right work.\n\n\
- **Utilization** (`hw.gpu.utilization`, `nvmlDeviceGetUtilizationRates`): the share of time at \
least one kernel was running, however small. One fp32 kernel at a time on a single SM reads \
100 %, so it says the GPU was never left waiting, not that it was used well (the H200: 1.0).\n\
- **SM activity** (`nvidia.gpu.sm.activity`, `NVML_GPM_METRIC_SM_UTIL`): the share of the \
streaming multiprocessors that had work, averaged over the window. Low SM activity under high \
utilization means kernels too small to fill the GPU: larger batches or fused kernels help (the \
H200: 0.88, nearly every SM busy).\n\
- **SM occupancy** (`nvidia.gpu.sm.occupancy`, `NVML_GPM_METRIC_SM_OCCUPANCY`): resident warps as \
a share of the most the SMs can hold. Matmul-heavy kernels run few, large warps and read low \
here while doing well, so read it beside tensor activity, not alone.\n\
- **Tensor activity** (`nvidia.gpu.tensor.activity`, `NVML_GPM_METRIC_ANY_TENSOR_UTIL`, by op: \
`hmma` half precision, `imma` integer, `dfma` FP64): the share of time the tensor cores did \
math. This is where a training job's speed comes from; near 0 under high utilization means \
fp32 or element-wise work, which `tensor_cores_idle` reports (the H200: 0.82 of the time, on \
bf16 HMMA).\n\
- **DRAM activity** (`nvidia.gpu.dram.activity`, `NVML_GPM_METRIC_DRAM_BW_UTIL`): the memory \
bandwidth used, as a share of the peak. Near 1 the kernels wait on memory rather than on math \
(`memory_bound` when the SMs are also mostly idle); the H200's 0.17 left bandwidth to spare.\n\
- **PCIe and NVLink bytes** (`hw.gpu.io`, `nvidia.gpu.nvlink.io`): data moved between the GPU \
and the host, and between GPUs. A steady stream from the host during training is the input \
pipeline; bursts on NVLink are gradient exchanges between the GPUs.\n\
- **Memory used** (`hw.gpu.memory.usage`, `nvmlDeviceGetMemoryInfo_v2`): what the driver gave out, \
not what the framework is using. TensorFlow (without memory growth) and JAX take a pool at \
start and PyTorch keeps what it reserved, so a full GPU is often a full pool: \
`memory_preallocated` says so once, and `memory_near_full` waits for memory that grows.\n";

/// `docs/events.md`, generated from [`RULES`].
pub fn markdown() -> String {
    let mut s = String::from(
        "# Events\n\n\
         Generated from `src/catalogue/events.rs` and `src/rules/catalogue.rs` (the test \
         `events_doc_matches_catalogue` fails when this file and the code disagree; regenerate \
         every generated doc with `UPDATE_DOCS=1 cargo test --test docs`).\n\n\
         The agent reports what happens to the GPUs as OpenTelemetry events: log records with an \
         `event.name`, sent with the metrics' resource (pod, container, node) over OTLP logs \
         (`OTEL_LOGS_EXPORTER`; `console` prints them as OTLP/JSON lines). These are all of them:\n\n",
    );
    let values: Vec<String> = RULES.iter().map(RuleSpec::values_doc).collect();
    s.push_str(&crate::catalogue::events::markdown_table(
        RULES
            .iter()
            .zip(&values)
            .map(|(r, v)| crate::catalogue::events::RuleEvent {
                name: r.event_name,
                severity: r.severity.as_str(),
                attributes: v,
            }),
    ));
    s.push_str(
        "\n## Alerts\n\n\
         The agent judges every sample with the rules below and reports what it finds as \
         `nvidia.gpu.alert.<rule>` events.\n\n\
         - An alert **fires** once, when its condition has held for the rule's duration (or \
         samples): one record with state `firing` and the rule's severity. It does not repeat \
         while it stays firing.\n\
         - It **resolves** once the condition has been clear for as long (except where the rule \
         says otherwise): one record with state `resolved`, severity `INFO`, the same \
         `event.name` and `hw.id`.\n\
         - A reading NVML does not give makes the condition unknown: an unknown sample neither \
         starts nor confirms an alert, and does not clear a firing one.\n\
         - Each firing and each resolution adds 1 to the counter `nvidia.gpu.alerts` \
         (see [metrics.md](metrics.md)); a series is born with its first transition (below).\n\
         - Time is the sample's: a condition \"for 10 s\" holds from the first sample where it is \
         true to a sample at least 10 s later, with no false sample between.\n\n\
         ## Attributes on every record\n\n\
         | attribute | value |\n| --- | --- |\n\
         | `hw.id`, `hw.type`, `hw.vendor`, `hw.model` | the GPU, as on its metrics |\n\
         | `nvidia.gpu.alert.rule` | the rule's name (below) |\n\
         | `nvidia.gpu.alert.state` | `firing` or `resolved` |\n\
         | `nvidia.gpu.alert.severity` | `info`, `warning` or `critical` (also on resolved records) |\n\
         | `nvidia.gpu.alert.threshold` | the threshold in force, in the setting's unit (rules with one) |\n\
         | `nvidia.gpu.alert.active_for` | firing: seconds the condition had held; resolved: seconds it was firing |\n\
         | `nvidia.gpu.alert.samples` | firing: consecutive samples on which the condition held |\n\
         | `nvidia.gpu.reading.<metric>[.<attribute value>]` | firing: every reading of the GPU at that sample, named after its metric in [metrics.md](metrics.md) and in the metric's unit, e.g. `nvidia.gpu.reading.hw.power`, `nvidia.gpu.reading.hw.temperature.gpu` |\n\n\
         The body is one line: what was seen, then what to do.\n\n\
         ## First occurrences\n\n\
         Nothing is exported for what never happened: a counter of events is born with its first \
         event. The `nvidia.gpu.alerts` series of a rule, state and GPU appears with that rule's \
         first transition on that GPU, and the `nvidia.gpu.xid.errors` series of an XID code and GPU \
         with the first report of that code, each at 1 and with the agent's start as start time (so \
         a backend that reads start times sees the step from 0). With each XID the agent also sets \
         `nvidia.gpu.xid.last_seen` of that GPU and code: the Unix time of the report, in seconds \
         (one series per GPU and code seen, as the count: a GPU without XIDs has neither).\n\n\
         **Why the XID alert survives restarts.** What Prometheus sees through the collector's \
         Prometheus exporter is not what the agent sends: the exporter drops start times (and \
         Prometheus 2.x reads no created timestamps), so a count born at 1 has no earlier point and \
         `increase()` reads 0; a sidecar restarted under the same identity (a container restart, a \
         StatefulSet's, LeaderWorkerSet's or fixed-name Job's pod recreated) counts its XID from 1 \
         again, and Prometheus sees 1 then 1, not a reset; a restarted collector answers its first \
         scrape empty, so every series is stale for one scrape; while the collector is down no \
         sample comes at all; and the series of a stopped sidecar stay exposed with their last \
         values until the exporter's `metric_expiration` (5 minutes), then vanish. A count cannot \
         carry an XID through that, nor can a per-GPU count born at 0 at each start (it would cost \
         one series per GPU, and an XID in a run's first export interval, the case of a pod that \
         crash-loops on a bad GPU, would still reach Prometheus as 1 then 1 whenever it scrapes \
         less often than the agent exports). A time does: `nvidia.gpu.xid.last_seen` changes at \
         every XID, in every run, and says itself how old the XID is. So `GPUXidError` \
         (`docker/prometheus-rules.yaml`, one alert per GPU and code) is \
         `time() - last_over_time(nvidia_gpu_xid_last_seen_seconds[5m]) < 300`: it fires at the \
         first scrape that sees the XID (in the agent's first export interval too, and for a code \
         never seen before), holds until the XID is 5 minutes old through empty scrapes and \
         collector outages shorter than that (the gauge alerts read their last value over 1 minute \
         only), and resolves then; it joins the pod's labels over 5 minutes \
         (`gpu_sidecar:reported_5m`), so a sidecar that stopped after the XID (a job that crashed \
         on it) keeps its alert for those 5 minutes, and through the newest `target_info`, so a pod \
         recreated on another node is named on its new node. Its value is the XID's age in seconds; \
         it assumes the node's clock and Prometheus' agree to within a minute or so (as the \
         reporting freshness check does). `GPUUncorrectedErrors` reads `hw.errors`, which counts \
         from 0 at the agent's first reading in every run (a restarted sidecar's 0 is a counter \
         reset to Prometheus), through `increase(...[5m])`: it holds across the same restarts and \
         outages; it misses only an error in a run's first export interval that reaches a \
         Prometheus scraping less often than the agent exports (the run's 0 never scraped), which \
         the `nvidia.gpu.ecc` event and the XID the driver reports with it still say. The promtool \
         tests (`tests/packaging/prometheus-rules-agent.test.yaml`) feed these shapes. The events \
         themselves (`nvidia.gpu.xid`, `nvidia.gpu.alert.*`) go out at once and are held while the \
         collector is down ([operations.md](operations.md#what-is-kept-during-a-collector-outage)).\n\n\
         ## Rules\n\n\
         Settings are `GPU_SIDECAR_RULE_<NAME>_ENABLED` (`true`/`false`, default `true`) and, \
         where the rule has them, `_THRESHOLD` (and a second threshold, named in the table), \
         `_DURATION` (with a unit: `30s`, `2m`) or `_SAMPLES`.\n\n",
    );
    s.push_str(
        "| `event.name` | severity | settings (defaults) | condition | attributes |\n\
         | --- | --- | --- | --- | --- |\n",
    );
    let cell = |t: &str| t.replace('|', "\\|");
    for r in RULES {
        let mut settings = vec![format!("`{}` = `true`", r.var("ENABLED"))];
        if let Some(t) = r.threshold {
            settings.push(format!(
                "`{}` = `{}` ({})",
                r.var("THRESHOLD"),
                t.default,
                t.unit
            ));
        }
        if let Some(t) = r.second_threshold {
            settings.push(format!(
                "`{}` = `{}` ({})",
                r.var(t.suffix),
                t.spec.default,
                t.spec.unit
            ));
        }
        match r.hold {
            HoldSpec::Immediate => {}
            HoldSpec::Duration(d) => settings.push(format!(
                "`{}` = `{}`",
                r.var("DURATION"),
                humantime::format_duration(d)
            )),
            HoldSpec::Samples(n) => settings.push(format!("`{}` = `{n}`", r.var("SAMPLES"))),
        }
        s.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            r.event_name,
            r.severity.as_str(),
            settings.join("<br>"),
            cell(r.condition),
            cell(&r.values_doc()),
        ));
    }
    s.push_str("\n## Hints\n\nThe sentence each firing record's body ends with.\n\n");
    for r in RULES {
        s.push_str(&format!("- `{}`: {}\n", r.name, r.hint));
    }
    s.push_str("\nXID codes with their own sentence:\n\n");
    for x in xid::XIDS {
        s.push_str(&format!("- {}\n", xid::hint(x.code)));
    }
    s.push_str(&format!("- any other code: {}.\n", xid::UNKNOWN_ACTION));
    s.push_str(READINGS);
    s.push_str(
        "\n## For the XID watcher\n\n\
         XIDs come from the NVML event watcher, not from samples: it publishes each into the \
         hub, and the rules take it from their subscription, in order with the snapshots, as an \
         `XidReport` (`xid_report` in `src/rules/mod.rs`) with the GPU's UUID, the code and when \
         it was seen. Without a watcher this rule never fires.\n",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_has_one_row_and_consistent_names() {
        let ids = [
            RuleId::MemoryNearFull,
            RuleId::MemoryPreallocated,
            RuleId::MemoryLeak,
            RuleId::TemperatureHigh,
            RuleId::ClocksPowerCapped,
            RuleId::ClocksSlowdown,
            RuleId::InputStarvation,
            RuleId::UtilizationImbalance,
            RuleId::TensorCoresIdle,
            RuleId::MemoryBound,
            RuleId::GpuLost,
            RuleId::Xid,
        ];
        assert_eq!(RULES.len(), ids.len());
        for id in ids {
            let r = id.spec();
            assert_eq!(RULES.iter().filter(|x| x.id == id).count(), 1);
            assert_eq!(r.event_name, format!("nvidia.gpu.alert.{}", r.name));
            assert_eq!(r.env, r.name.to_ascii_uppercase());
            assert!(r.hint.ends_with('.'), "{}", r.name);
        }
    }

    /// Every alert value key is carried by some rule, and every rule's values are declared in
    /// the alert-value catalogue.
    #[test]
    fn every_alert_value_is_on_a_rule_row() {
        for value in v::ALERT_VALUES {
            assert!(
                RULES.iter().any(|r| r.values.contains(value)),
                "{} is on no rule",
                value.key
            );
        }
        for r in RULES {
            assert!(!r.values.is_empty(), "{}", r.name);
            for value in r.values {
                assert!(v::ALERT_VALUES.contains(value), "{}: {}", r.name, value.key);
            }
        }
        assert_eq!(
            RuleId::TemperatureHigh.spec().values_doc(),
            "`hw.temperature` (Cel, GPU die), `nvidia.gpu.alert.temperature.memory` (Cel, HBM, when NVML gives it)"
        );
    }

    #[test]
    fn defaults_are_the_issue_s() {
        let t = |id: RuleId| id.spec().threshold.unwrap().default;
        assert_eq!(t(RuleId::MemoryNearFull), 95.0);
        assert_eq!(t(RuleId::TemperatureHigh), 85.0);
        assert_eq!(t(RuleId::InputStarvation), 20.0);
        assert_eq!(t(RuleId::UtilizationImbalance), 50.0);
        // Issue 17: utilization >= 90 % while tensor activity < 10 % for 5 minutes.
        assert_eq!(t(RuleId::TensorCoresIdle), 10.0);
        let second = |id: RuleId| id.spec().second_threshold.unwrap();
        assert_eq!(second(RuleId::TensorCoresIdle).suffix, "UTILIZATION");
        assert_eq!(second(RuleId::TensorCoresIdle).spec.default, 90.0);
        assert_eq!(
            RuleId::TensorCoresIdle.spec().default_hold(),
            Hold::Duration(Duration::from_secs(300))
        );
        assert_eq!(second(RuleId::MemoryBound).suffix, "SM_ACTIVITY");
        assert_eq!(
            RuleId::MemoryPreallocated.spec().severity,
            AlertSeverity::Info
        );
        assert_eq!(
            RuleId::MemoryNearFull.spec().default_hold(),
            Hold::Duration(Duration::from_secs(10))
        );
        assert_eq!(
            RuleId::TemperatureHigh.spec().default_hold(),
            Hold::Samples(3)
        );
        assert_eq!(
            RuleId::ClocksPowerCapped.spec().default_hold(),
            Hold::Duration(Duration::from_secs(30))
        );
        assert_eq!(
            RuleId::InputStarvation.spec().default_hold(),
            Hold::Duration(Duration::from_secs(120))
        );
        assert_eq!(
            RuleId::MemoryLeak.spec().default_hold(),
            Hold::Duration(Duration::from_secs(600))
        );
        assert_eq!(
            RuleId::ClocksPowerCapped.spec().severity,
            AlertSeverity::Info
        );
        assert_eq!(RuleId::GpuLost.spec().severity, AlertSeverity::Critical);
        assert_eq!(RuleId::Xid.spec().severity, AlertSeverity::Critical);
    }
}
