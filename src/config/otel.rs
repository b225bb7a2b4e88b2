//! The standard OpenTelemetry variables ([`OTEL_VARIABLES`]): every `OTEL_*` variable of the
//! SDK environment and OTLP exporter specifications that could reach a metrics-and-logs
//! exporter, and what the agent does with it; `docs/otel-variables.md` is generated from it.

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
    honoured!("OTEL_BLRP_SCHEDULE_DELAY", "`1000`", "milliseconds between two exports of queued events while events keep coming (a lone event is sent at once)", "500"),
    honoured!("OTEL_BLRP_MAX_QUEUE_SIZE", "`1024`", "events held while the collector is slow or down, sent again until it takes them; when full the oldest is dropped (counted in `gpu_sidecar.events.dropped`); 1024 hold a minute of 17 XIDs a second, at most ~2.7 MiB ([operations](operations.md#what-is-kept-during-a-collector-outage))", "100"),
    honoured!("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE", "`512`", "events per export (at most the queue size)", "50"),
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
            v.default,
            v.what.replace('|', "\\|")
        ));
    }
    s
}
