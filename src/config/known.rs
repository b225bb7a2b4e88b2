//! Every setting the agent knows, from its three tables: the agent's and the webhook's
//! ([`SETTINGS`]), the alert rules' ([`RULES`]) and the standard `OTEL_*` ones
//! ([`OTEL_VARIABLES`]), with the Downward API's [`DOWNWARD_API`]. From them: the
//! unknown-name check with its "did you mean" ([`check_names`]), `--help`'s list
//! ([`settings_help`]) and `docs/settings.md` ([`settings_markdown`]).

use std::collections::BTreeMap;

use super::otel::{OtelUse, OTEL_VARIABLES};
use super::rules::threshold_accepts;
use super::settings::{Component, DURATION, PREFIX, SETTINGS};
use super::{ConfigError, DOWNWARD_API};
use crate::rules::catalogue::{HoldSpec, RuleSpec, RULES};

/// The variables of one rule, with each one's default and what it accepts, in
/// [`RuleSpec::setting_suffixes`]'s order.
fn rule_variables(r: &RuleSpec) -> Vec<(String, String, String)> {
    let mut v = vec![(
        r.var("ENABLED"),
        "true".to_string(),
        "true or false".to_string(),
    )];
    if let Some(t) = r.threshold {
        v.push((
            r.var("THRESHOLD"),
            t.default.to_string(),
            threshold_accepts(&t),
        ));
    }
    if let Some(t) = r.second_threshold {
        v.push((
            r.var(t.suffix),
            t.spec.default.to_string(),
            threshold_accepts(&t.spec),
        ));
    }
    match r.hold {
        HoldSpec::Immediate => {}
        HoldSpec::Duration(d) => v.push((
            r.var("DURATION"),
            humantime::format_duration(d).to_string(),
            DURATION.to_string(),
        )),
        HoldSpec::Samples(n) => v.push((
            r.var("SAMPLES"),
            n.to_string(),
            "a whole number of consecutive samples, at least 1".to_string(),
        )),
    }
    v
}

/// Whether `name` (a full variable name with [`PREFIX`]) is a setting of the agent, of
/// the webhook command or of an alert rule.
pub fn is_known(name: &str) -> bool {
    SETTINGS.iter().any(|s| s.name == name)
        || RULES
            .iter()
            .any(|r| r.setting_suffixes().iter().any(|s| r.var(s) == name))
}

/// Every `GPU_SIDECAR_*` name: the table's, then the rules'.
fn own_names() -> impl Iterator<Item = String> {
    SETTINGS.iter().map(|s| s.name.to_string()).chain(
        RULES
            .iter()
            .flat_map(|r| r.setting_suffixes().into_iter().map(move |s| r.var(s))),
    )
}

/// The known setting nearest to `unknown` (both full names), when it is near enough to be
/// a typo of it: normalized Damerau-Levenshtein similarity, over the names without
/// [`PREFIX`], of at least 0.6 (up to four letters wrong, swapped, missing or extra in a
/// name of ten or more).
pub fn nearest_setting(unknown: &str) -> Option<String> {
    let bare = |n: &str| n.strip_prefix(PREFIX).unwrap_or(n).to_string();
    let unknown = bare(unknown);
    own_names()
        .map(|known| {
            (
                strsim::normalized_damerau_levenshtein(&unknown, &bare(&known)),
                known,
            )
        })
        .filter(|(similarity, _)| *similarity >= 0.6)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, known)| known)
}

/// Refuses any `GPU_SIDECAR_*` variable that is no setting (a probable typo), naming the
/// nearest known one.
///
/// # Errors
/// A [`ConfigError`] ([`ConfigProblem::NoSuchSetting`](super::ConfigProblem)) for the first
/// unknown name.
pub fn check_names(vars: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    match vars
        .iter()
        .find(|(key, _)| key.starts_with(PREFIX) && !is_known(key))
    {
        Some((key, value)) => Err(ConfigError::no_such_setting(
            key,
            value,
            nearest_setting(key),
        )),
        None => Ok(()),
    }
}

/// The honoured standard variables, in [`OTEL_VARIABLES`]' order.
fn honoured_otel() -> impl Iterator<Item = &'static super::OtelVariable> {
    OTEL_VARIABLES
        .iter()
        .filter(|v| v.used == OtelUse::Honoured)
}

/// The names of every setting, for `gpu-otel-sidecar --help`: lines of at most 100
/// characters, one group per line start (the agent's `GPU_SIDECAR_*`, the alert rules
/// with their suffixes in braces, the webhook's, the honoured `OTEL_*`, the Downward API
/// `K8S_*` with the default list's pod label variables), the names `docs/settings.md` gives
/// in its first column.
pub fn settings_help() -> String {
    let of = |c: Component| {
        SETTINGS
            .iter()
            .filter(move |s| s.component == c)
            .map(|s| s.name.to_string())
            .collect::<Vec<_>>()
    };
    let groups: [Vec<String>; 5] = [
        of(Component::Agent),
        RULES.iter().map(rule_row_name).collect(),
        of(Component::Webhook),
        honoured_otel().map(|v| v.name.to_string()).collect(),
        DOWNWARD_API
            .iter()
            .map(|(v, _)| v.to_string())
            .chain(super::job::documented_label_variables())
            .collect(),
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

/// A rule's settings as one name: `GPU_SIDECAR_RULE_XID_{ENABLED,DURATION}`.
fn rule_row_name(r: &RuleSpec) -> String {
    match r.setting_suffixes().as_slice() {
        [one] => r.var(one),
        many => format!("{PREFIX}RULE_{}_{{{}}}", r.env, many.join(",")),
    }
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

/// `docs/settings.md`, generated from the tables (the test `settings_doc_matches_the_tables`
/// fails when the file and the code disagree).
pub fn settings_markdown() -> String {
    let mut s = String::from(
        "# Settings\n\n\
         Generated from the settings tables: `SETTINGS` in `src/config/settings.rs` (the agent's and the \
         webhook's), `RULES` in `src/rules/catalogue.rs` (the alert rules), `OTEL_VARIABLES` in \
         `src/config/otel.rs` (the standard `OTEL_*` ones) and `DOWNWARD_API` in `src/config/mod.rs`. \
         The test `settings_doc_matches_the_tables` fails when this file and the code disagree; \
         regenerate every generated doc with `UPDATE_DOCS=1 cargo test --test docs`. A new setting is one row of \
         the table it belongs to; its parsing reads the row.\n\n\
         All settings are environment variables (`gpu-otel-sidecar --help` lists their names). An empty \
         variable counts as unset. A bad value stops the agent with exit code 2 and one line naming the \
         variable, the value and what it accepts (the *accepts* column). `gpu-otel-sidecar check-config` \
         reads them as the agent would and prints what it understood as one JSON object (resource \
         attributes decoded, header names without their values; no NVML loaded, nothing connected), exit \
         0, or 2 with that same line: a dry run for a rendered Helm chart or compose file. Durations are \
         written with a unit: `500ms`, `5s`, `1m`. Unknown `GPU_SIDECAR_*` variables are refused (typos), \
         with the nearest known name (`did you mean …?`).\n\n\
         Exit codes: 0 after SIGTERM/SIGINT (a clean stop); 1 when the agent cannot start: the OTLP \
         exporter cannot be set up (e.g. an `https://` endpoint and no CA bundle) or the health port is in \
         use (`GPU_SIDECAR_HEALTH_ADDR`); 2 for a bad setting or argument. `gpu-otel-sidecar health` exits \
         0 when ready, 1 otherwise.\n\n\
         ## The agent\n\n",
    );
    let table = |s: &mut String, c: Component| {
        s.push_str("| variable | default | accepts | what |\n| --- | --- | --- | --- |\n");
        for row in SETTINGS.iter().filter(|r| r.component == c) {
            s.push_str(&format!(
                "| `{}` | {} | {} | {} |\n",
                row.name,
                row.default_markdown(),
                cell(row.accepts),
                cell(row.doc)
            ));
        }
    };
    table(&mut s, Component::Agent);
    s.push_str(
        "\n## Alert rules\n\n\
         Each rule has an `ENABLED` setting and, where it has them, a threshold, a second threshold and a \
         hold (`DURATION`, or `SAMPLES` in a row). Percent thresholds accept a trailing `%` (`95%`). What \
         each rule checks exactly, the records it sends and their attributes: [events.md](events.md).\n\n\
         | variables | defaults | accepts | rule |\n| --- | --- | --- | --- |\n",
    );
    for r in RULES {
        let vars = rule_variables(r);
        let defaults: Vec<String> = vars.iter().map(|(_, d, _)| format!("`{d}`")).collect();
        let accepts: Vec<String> = vars
            .iter()
            .map(|(v, _, a)| {
                let suffix = v.strip_prefix(&r.var("")).unwrap_or(v);
                format!("{suffix}: {a}")
            })
            .collect();
        s.push_str(&format!(
            "| `{}` | {} | {} | [`{}`](events.md) ({}) |\n",
            rule_row_name(r),
            defaults.join(", "),
            cell(&accepts.join("; ")),
            r.name,
            r.severity.as_str()
        ));
    }
    s.push_str(
        "\n## Standard OpenTelemetry variables\n\n\
         The ones the agent honours; every other `OTEL_*` variable that could reach a metrics-and-logs \
         exporter, and why it does not apply, is in [otel-variables.md](otel-variables.md) (generated \
         from the same table). A per-signal variable (`OTEL_EXPORTER_OTLP_METRICS_*`, \
         `OTEL_EXPORTER_OTLP_LOGS_*`) wins over the general one for its signal; the events are the logs \
         signal. `OTEL_RESOURCE_ATTRIBUTES` values are percent-encoded (`%2C` for a comma, `%20` for a \
         space) and win over the `K8S_*` variables and over the derived `service.instance.id`.\n\n\
         | variable | default | what |\n| --- | --- | --- |\n",
    );
    for v in honoured_otel() {
        s.push_str(&format!(
            "| `{}` | {} | {} |\n",
            v.name,
            v.default.markdown(),
            cell(v.what)
        ));
    }
    s.push_str(
        "\n## Kubernetes Downward API\n\n\
         Set by the Helm chart and the webhook from the pod's fields; `K8S_CONTAINER_NAME` is the \
         GPU-using container's name (not the sidecar's). `host.name` comes from the kernel unless \
         `OTEL_RESOURCE_ATTRIBUTES` gives it. A pod label's variable is `K8S_POD_LABEL_` and its key in \
         capitals, `_` for every other character, for each key of `GPU_SIDECAR_POD_LABELS` (the rows below \
         are the default's) and the three read for `k8s.job.name`; an empty one (a label the pod lacks) \
         adds nothing, and one of no such key is refused.\n\n\
         | variable | default | what |\n| --- | --- | --- |\n",
    );
    for (var, attribute) in DOWNWARD_API {
        s.push_str(&format!(
            "| `{var}` | none | Downward API → `{attribute}` |\n"
        ));
    }
    s.push_str(&super::job::label_rows_markdown());
    s.push_str(
        "\n## The webhook command\n\n\
         The `webhook` command (the admission webhook the Helm chart installs, see \
         [Kubernetes](kubernetes.md#kubernetes-helm)) reads these, plus `GPU_SIDECAR_LOG_FORMAT`, \
         `GPU_SIDECAR_LOG_LEVEL`, the metric export settings above (`OTEL_METRICS_EXPORTER`, \
         `OTEL_EXPORTER_OTLP_*`, `OTEL_METRIC_EXPORT_INTERVAL`; its one metric is \
         `gpu_sidecar.webhook.admissions`, see [metrics.md](metrics.md)), `OTEL_SERVICE_NAME` (default \
         `gpu-otel-sidecar-webhook`), `OTEL_RESOURCE_ATTRIBUTES` and the `K8S_*` variables. A bad value \
         or file stops it with exit code 2 and one line naming the variable.\n\n",
    );
    table(&mut s, Component::Webhook);
    s
}
