//! The standard OpenTelemetry variables ([`OTEL_VARIABLES`]): every `OTEL_*` variable of the
//! SDK environment and OTLP exporter specifications that could reach a metrics-and-logs
//! exporter, and what the agent does with it; `docs/otel-variables.md` is generated from it.
//!
//! A honoured variable's default is declared once, typed, on its row ([`OtelDefault`]):
//! the parsing reads the variable through its row (its name, and that default when unset)
//! and the docs write the same default as text ([`OtelDefault::markdown`]), as the agent's
//! own settings do ([`super::settings`]).

use std::collections::BTreeMap;
use std::time::Duration;

use super::values::{parse_bool, parse_exporter, parse_millis};
use super::{ConfigError, ExporterKind};

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
    /// What an unset (or empty) variable means; the docs' text derives from it.
    pub default: OtelDefault,
    /// What the agent does with it.
    pub what: &'static str,
    /// A value a test sets (`<ca>`, `<cert>`, `<key>`: PEM files the test writes).
    pub example: &'static str,
}

/// What an unset standard variable means, typed: the value the parsing uses, and from it
/// the text of the docs' default column ([`OtelDefault::markdown`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtelDefault {
    /// A number of milliseconds (`OTEL_*_TIMEOUT`, `OTEL_METRIC_EXPORT_INTERVAL`, …).
    Millis(u64),
    /// A count (`OTEL_BLRP_MAX_QUEUE_SIZE`, …).
    Count(usize),
    /// `true` or `false`.
    Bool(bool),
    /// One of the words the variable accepts (`otlp`, `grpc`, `cumulative`, `none`).
    Word(&'static str),
    /// A word, with the one case where another applies, in words
    /// (`OTEL_LOGS_EXPORTER`: `otlp`, `console` when the metrics go to the console).
    WordUnless(&'static str, &'static str),
    /// The collector URL for each protocol (`OTEL_EXPORTER_OTLP_ENDPOINT`).
    Endpoints {
        /// Over gRPC.
        grpc: &'static str,
        /// Over HTTP (the base URL; `/v1/metrics` or `/v1/logs` is appended).
        http: &'static str,
    },
    /// No value; what that means, in words (`none`, the system trust store).
    Means(&'static str),
    /// The variable does not apply to this agent (`-`).
    NotApplied,
}

impl OtelDefault {
    /// The default as `docs/otel-variables.md` and `docs/settings.md` write it.
    pub fn markdown(&self) -> String {
        match *self {
            OtelDefault::Millis(ms) => format!("`{ms}`"),
            OtelDefault::Count(n) => format!("`{n}`"),
            OtelDefault::Bool(b) => format!("`{b}`"),
            OtelDefault::Word(w) => format!("`{w}`"),
            OtelDefault::WordUnless(w, unless) => format!("`{w}` ({unless})"),
            OtelDefault::Endpoints { grpc, http } => format!("`{grpc}` (gRPC), `{http}` (HTTP)"),
            OtelDefault::Means(words) => words.to_string(),
            OtelDefault::NotApplied => "-".to_string(),
        }
    }
}

impl OtelVariable {
    /// The value of this row's variable (unset or empty: `None`).
    fn value<'a>(&self, get: &impl Fn(&str) -> Option<&'a str>) -> Option<&'a str> {
        get(self.name)
    }

    /// A milliseconds row, read: the set value, or its default.
    ///
    /// # Panics
    /// When the row's default is not [`OtelDefault::Millis`] (a mistake in the table,
    /// caught by every test that reads the defaults).
    pub(super) fn millis<'a>(
        &self,
        get: &impl Fn(&str) -> Option<&'a str>,
    ) -> Result<Duration, ConfigError> {
        match self.value(get) {
            Some(v) => parse_millis(self.name, v),
            None => Ok(self.default_millis()),
        }
    }

    /// A `true`/`false` row, read (see [`OtelVariable::millis`]).
    pub(super) fn boolean<'a>(
        &self,
        get: &impl Fn(&str) -> Option<&'a str>,
    ) -> Result<bool, ConfigError> {
        match (self.value(get), self.default) {
            (Some(v), _) => parse_bool(self.name, v),
            (None, OtelDefault::Bool(b)) => Ok(b),
            (None, other) => panic!("{}: default {other:?} is not true/false", self.name),
        }
    }

    /// A count row, read (see [`OtelVariable::millis`]): a whole number greater than zero.
    pub(super) fn count<'a>(
        &self,
        get: &impl Fn(&str) -> Option<&'a str>,
    ) -> Result<usize, ConfigError> {
        match (self.value(get), self.default) {
            (Some(v), _) => match v.trim().parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(ConfigError::new(
                    self.name,
                    v,
                    "a whole number greater than zero",
                )),
            },
            (None, OtelDefault::Count(n)) => Ok(n),
            (None, other) => panic!("{}: default {other:?} is not a count", self.name),
        }
    }

    /// This row's default as a duration (a [`OtelDefault::Millis`] row).
    pub(super) fn default_millis(&self) -> Duration {
        match self.default {
            OtelDefault::Millis(ms) => Duration::from_millis(ms),
            other => panic!("{}: default {other:?} is not milliseconds", self.name),
        }
    }

    /// This row's default word (a [`OtelDefault::Word`] or [`OtelDefault::WordUnless`] row).
    pub(super) fn default_word(&self) -> &'static str {
        match self.default {
            OtelDefault::Word(w) | OtelDefault::WordUnless(w, _) => w,
            other => panic!("{}: default {other:?} is not a word", self.name),
        }
    }
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
            default: OtelDefault::NotApplied,
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
                OtelDefault::Endpoints {
                    grpc: "http://localhost:4317",
                    http: "http://localhost:4318",
                },
                concat!("collector URL for ", $scope, "; the general one gets `/v1/metrics` or `/v1/logs` appended over HTTP, a per-signal one is used as given; a schemeless `host:port` means https unless insecure"),
                "http://collector.example:4317"
            ),
            honoured!(
                concat!("OTEL_EXPORTER_OTLP_", $infix, "PROTOCOL"),
                OtelDefault::Word("grpc"),
                concat!("`grpc` or `http/protobuf` for ", $scope, " (`http/json` is refused)"),
                "http/protobuf"
            ),
            honoured!(
                concat!("OTEL_EXPORTER_OTLP_", $infix, "HEADERS"),
                OtelDefault::Means("none"),
                concat!("`key=value,…` (percent-encoded values) sent with every request of ", $scope, "; values never appear in logs"),
                "authorization=Bearer%20t0k"
            ),
            honoured!(
                concat!("OTEL_EXPORTER_OTLP_", $infix, "TIMEOUT"),
                OtelDefault::Millis(10_000),
                concat!("milliseconds: bound on one export of ", $scope, ", retries included"),
                "2500"
            ),
            honoured!(
                concat!("OTEL_EXPORTER_OTLP_", $infix, "COMPRESSION"),
                OtelDefault::Word("none"),
                concat!("`gzip` or `none` for ", $scope),
                "gzip"
            ),
            honoured!(
                concat!("OTEL_EXPORTER_OTLP_", $infix, "CERTIFICATE"),
                OtelDefault::Means("system trust store"),
                concat!("PEM file of the CA(s) trusted for the collector's certificate (`https://` endpoints), for ", $scope),
                "<ca>"
            ),
            honoured!(
                concat!("OTEL_EXPORTER_OTLP_", $infix, "CLIENT_CERTIFICATE"),
                OtelDefault::Means("none"),
                concat!("PEM client certificate chain for mutual TLS, for ", $scope, "; with the client key"),
                "<cert>"
            ),
            honoured!(
                concat!("OTEL_EXPORTER_OTLP_", $infix, "CLIENT_KEY"),
                OtelDefault::Means("none"),
                concat!("PEM private key of the client certificate, for ", $scope, "; never logged"),
                "<key>"
            ),
            honoured!(
                concat!("OTEL_EXPORTER_OTLP_", $infix, "INSECURE"),
                OtelDefault::Bool(false),
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

/// The general `OTEL_EXPORTER_OTLP_*` rows by what they set; a per-signal form
/// (`OTEL_EXPORTER_OTLP_METRICS_TIMEOUT`) has the same default as its general row.
pub(super) mod otlp_row {
    use super::{OtelVariable, OTLP_GENERAL};
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub const ENDPOINT: OtelVariable = OTLP_GENERAL[0];
    /// `OTEL_EXPORTER_OTLP_PROTOCOL`.
    pub const PROTOCOL: OtelVariable = OTLP_GENERAL[1];
    /// `OTEL_EXPORTER_OTLP_TIMEOUT`.
    pub const TIMEOUT: OtelVariable = OTLP_GENERAL[3];
    /// `OTEL_EXPORTER_OTLP_COMPRESSION`.
    pub const COMPRESSION: OtelVariable = OTLP_GENERAL[4];
    /// `OTEL_EXPORTER_OTLP_INSECURE`.
    pub const INSECURE: OtelVariable = OTLP_GENERAL[8];
}

/// `OTEL_SDK_DISABLED`.
pub const SDK_DISABLED: OtelVariable = honoured!("OTEL_SDK_DISABLED", OtelDefault::Bool(false), "`true`: nothing is exported (metrics and events); sampling, rules, the run report, the sample log and health go on", "true");
/// `OTEL_SERVICE_NAME`.
pub const SERVICE_NAME: OtelVariable = honoured!(
    "OTEL_SERVICE_NAME",
    OtelDefault::Word(super::DEFAULT_SERVICE_NAME),
    "`service.name`",
    "trainer-gpus"
);
/// `OTEL_RESOURCE_ATTRIBUTES`.
pub const RESOURCE_ATTRIBUTES: OtelVariable = honoured!(
    "OTEL_RESOURCE_ATTRIBUTES",
    OtelDefault::Means("none"),
    "`key=value,…` added to the resource; wins over the `K8S_*` variables",
    "team=vision"
);
/// `OTEL_METRICS_EXPORTER`.
pub const METRICS_EXPORTER: OtelVariable = honoured!(
    "OTEL_METRICS_EXPORTER",
    OtelDefault::Word("otlp"),
    "`otlp`, `console` (one line of OTLP/JSON per export on stdout) or `none`",
    "console"
);
/// `OTEL_LOGS_EXPORTER`.
pub const LOGS_EXPORTER: OtelVariable = honoured!(
    "OTEL_LOGS_EXPORTER",
    OtelDefault::WordUnless("otlp", "`console` when `OTEL_METRICS_EXPORTER=console`"),
    "events: `otlp`, `console` or `none`",
    "none"
);
/// `OTEL_METRIC_EXPORT_INTERVAL`.
pub const METRIC_EXPORT_INTERVAL: OtelVariable = honoured!(
    "OTEL_METRIC_EXPORT_INTERVAL",
    OtelDefault::Millis(10_000),
    "milliseconds between metric exports (each right after a sample)",
    "2000"
);
/// `OTEL_METRIC_EXPORT_TIMEOUT`.
pub const METRIC_EXPORT_TIMEOUT: OtelVariable = honoured!("OTEL_METRIC_EXPORT_TIMEOUT", OtelDefault::Millis(30_000), "milliseconds: bound on one metrics export, retries included (the OTLP timeout bounds it too; the smaller wins)", "4000");
/// `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`.
pub const TEMPORALITY_PREFERENCE: OtelVariable = honoured!("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", OtelDefault::Word("cumulative"), "`cumulative`; `delta` (counters and the histogram delta, up-down counters cumulative); `lowmemory` (what the agent records as it happens, XIDs, alerts and sample durations, delta; counters read from NVML or its own state cumulative)", "delta");
/// `OTEL_BLRP_SCHEDULE_DELAY`.
pub const BLRP_SCHEDULE_DELAY: OtelVariable = honoured!("OTEL_BLRP_SCHEDULE_DELAY", OtelDefault::Millis(1000), "milliseconds between two exports of queued events while events keep coming (a lone event is sent at once)", "500");
/// `OTEL_BLRP_MAX_QUEUE_SIZE`: its default is [`super::DEFAULT_EVENTS_QUEUE_SIZE`].
pub const BLRP_MAX_QUEUE_SIZE: OtelVariable = honoured!("OTEL_BLRP_MAX_QUEUE_SIZE", OtelDefault::Count(super::DEFAULT_EVENTS_QUEUE_SIZE), "events held while the collector is slow or down, sent again until it takes them; when full the oldest is dropped (counted in `gpu_sidecar.events.dropped`); 1024 hold a minute of 17 XIDs a second, at most ~2.7 MiB ([operations](operations.md#what-is-kept-during-a-collector-outage))", "100");
/// `OTEL_BLRP_MAX_EXPORT_BATCH_SIZE`.
pub const BLRP_MAX_EXPORT_BATCH_SIZE: OtelVariable = honoured!(
    "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE",
    OtelDefault::Count(512),
    "events per export (at most the queue size)",
    "50"
);

/// Every standard `OTEL_*` variable that could reach a metrics-and-logs exporter, and what
/// the agent does with it. `docs/otel-variables.md` is generated from it; a set variable
/// that is not in here is named in the start-up warning as unknown.
pub static OTEL_VARIABLES: &[OtelVariable] = &[
    SDK_DISABLED, SERVICE_NAME, RESOURCE_ATTRIBUTES, METRICS_EXPORTER, LOGS_EXPORTER,
    METRIC_EXPORT_INTERVAL, METRIC_EXPORT_TIMEOUT, TEMPORALITY_PREFERENCE,
    BLRP_SCHEDULE_DELAY, BLRP_MAX_QUEUE_SIZE, BLRP_MAX_EXPORT_BATCH_SIZE,
    OTLP_GENERAL[0], OTLP_GENERAL[1], OTLP_GENERAL[2], OTLP_GENERAL[3], OTLP_GENERAL[4],
    OTLP_GENERAL[5], OTLP_GENERAL[6], OTLP_GENERAL[7], OTLP_GENERAL[8],
    OTLP_METRICS[0], OTLP_METRICS[1], OTLP_METRICS[2], OTLP_METRICS[3], OTLP_METRICS[4],
    OTLP_METRICS[5], OTLP_METRICS[6], OTLP_METRICS[7], OTLP_METRICS[8],
    OTLP_LOGS[0], OTLP_LOGS[1], OTLP_LOGS[2], OTLP_LOGS[3], OTLP_LOGS[4],
    OTLP_LOGS[5], OTLP_LOGS[6], OTLP_LOGS[7], OTLP_LOGS[8],
    not_applied!("OTEL_BLRP_EXPORT_TIMEOUT", "each events export is bounded by the OTLP timeout (`OTEL_EXPORTER_OTLP_[LOGS_]TIMEOUT`), and a failed one is sent again later", "5000"),
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

/// Where the two signals go, from `OTEL_METRICS_EXPORTER`, `OTEL_LOGS_EXPORTER` and
/// `OTEL_SDK_DISABLED` (which turns both off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Exporters {
    pub metrics: ExporterKind,
    pub logs: ExporterKind,
    pub sdk_disabled: bool,
}

/// Reads [`Exporters`] through their rows.
pub(super) fn parse_exporters<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
) -> Result<Exporters, ConfigError> {
    let exporter = |row: &OtelVariable| {
        let v = row.value(get).unwrap_or(row.default_word());
        parse_exporter(row.name, v)
    };
    let metrics = exporter(&METRICS_EXPORTER)?;
    let logs = match LOGS_EXPORTER.value(get) {
        // Console metrics mean "show me here": the events come along, rather than going
        // to a collector the user did not ask for (the row's `WordUnless`).
        None if metrics == ExporterKind::Console => ExporterKind::Console,
        _ => exporter(&LOGS_EXPORTER)?,
    };
    let sdk_disabled = SDK_DISABLED.boolean(get)?;
    Ok(if sdk_disabled {
        Exporters {
            metrics: ExporterKind::None,
            logs: ExporterKind::None,
            sdk_disabled,
        }
    } else {
        Exporters {
            metrics,
            logs,
            sdk_disabled,
        }
    })
}

/// The `OTEL_*` variables set (non-empty) that the agent does not apply, each with why: the
/// row's reason, or that it is unknown (with the nearest known name).
pub(super) fn not_applied(vars: &BTreeMap<String, String>) -> Vec<(String, String)> {
    vars.iter()
        .filter(|(k, v)| k.starts_with("OTEL_") && !v.is_empty())
        .filter_map(|(k, _)| match otel_variable(k) {
            Some(row) if row.used == OtelUse::Honoured => None,
            Some(row) => Some((k.clone(), row.what.to_string())),
            None => Some((k.clone(), unknown_otel_variable(k))),
        })
        .collect()
}

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

/// The variable of [`OTEL_VARIABLES`] (a whole name, not a `PREFIX_*` row) nearest to
/// `unknown`, when it is near enough to be a typo of it: normalized Damerau-Levenshtein
/// similarity of at least 0.85 over the names without `OTEL_` (one or two letters wrong,
/// swapped, missing or extra). Used for the start-up warning; an unknown `OTEL_*` name is
/// never refused (the SDKs of other languages and the OpenTelemetry Operator set names
/// this table does not hold).
pub fn nearest_otel_variable(unknown: &str) -> Option<&'static str> {
    let bare = |n: &str| n.strip_prefix("OTEL_").unwrap_or(n).to_string();
    let unknown = bare(unknown);
    OTEL_VARIABLES
        .iter()
        .filter(|v| !v.name.ends_with('*'))
        .map(|v| {
            (
                strsim::normalized_damerau_levenshtein(&unknown, &bare(v.name)),
                v.name,
            )
        })
        .filter(|(similarity, _)| *similarity >= 0.85)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, name)| name)
}

/// Why a set `OTEL_*` variable that [`OTEL_VARIABLES`] does not hold is ignored, with the
/// nearest known name when one is close ([`nearest_otel_variable`]).
pub fn unknown_otel_variable(name: &str) -> String {
    const UNKNOWN: &str =
        "not a variable of the OpenTelemetry SDK or OTLP exporter specifications that the agent knows";
    match nearest_otel_variable(name) {
        Some(near) => format!("{UNKNOWN}; did you mean {near}?"),
        None => UNKNOWN.to_string(),
    }
}

/// `docs/otel-variables.md`, generated from [`OTEL_VARIABLES`].
pub fn otel_variables_markdown() -> String {
    let mut s = String::from(
        "# Standard OpenTelemetry variables\n\n\
         Generated from `OTEL_VARIABLES` in `src/config/otel.rs` (the test `otel_variables_doc_matches_the_table` \
         fails when this file and the code disagree; regenerate every generated doc with `UPDATE_DOCS=1 cargo test --test docs`).\n\n\
         Every variable of the OpenTelemetry SDK environment and OTLP exporter specifications that could \
         reach a metrics-and-logs exporter, and what the agent does with it. *Honoured*: read and applied; \
         a bad value stops the agent with exit code 2 and one line naming the variable and what it accepts. \
         *Not applied*: when set, it is named, with the reason, in one warning at start, and ignored; any \
         other `OTEL_*` variable that is set is named in that warning as unknown, with the nearest \
         known name when one is close (`did you mean OTEL_EXPORTER_OTLP_ENDPOINT?` for \
         `OTEL_EXPORTER_OTLP_ENDPIONT`); none is refused. A per-signal variable \
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
            v.default.markdown(),
            v.what.replace('|', "\\|")
        ));
    }
    s
}
