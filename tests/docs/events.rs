//! `docs/events.md` is generated from the event catalogue and the rule table; this test
//! fails when they disagree. Regenerate with `UPDATE_DOCS=1 cargo test --test docs`.

use gpu_otel_sidecar::catalogue::events::{ALERT, DEVICE_AND_RUN_EVENTS};
use gpu_otel_sidecar::catalogue::metrics::RECORDED;
use gpu_otel_sidecar::rules::catalogue::{markdown, RULES};

#[test]
fn events_doc_matches_catalogue() {
    let on_disk = super::assert_generated("events.md", &markdown());
    for r in RULES {
        assert!(on_disk.contains(&format!("| `{}` | {} |", r.event_name, r.severity.as_str())));
    }
    for e in DEVICE_AND_RUN_EVENTS.iter().chain([&ALERT]) {
        assert!(on_disk.contains(&format!("| `{}` |", e.name)), "{}", e.name);
    }
}

#[test]
fn every_rule_is_a_value_of_the_alerts_counter_and_in_the_settings_doc() {
    let alerts = RECORDED
        .iter()
        .find(|d| d.name == "nvidia.gpu.alerts")
        .expect("nvidia.gpu.alerts is documented");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/settings.md");
    let settings = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    for r in RULES {
        assert!(
            alerts.attributes.contains(&format!("`{}`", r.name)),
            "{} missing from nvidia.gpu.alerts' attribute values",
            r.name
        );
        let suffixes = r.setting_suffixes();
        let row = match suffixes.as_slice() {
            [one] => format!("`{}`", r.var(one)),
            many => format!("`GPU_SIDECAR_RULE_{}_{{{}}}`", r.env, many.join(",")),
        };
        assert!(
            settings.contains(&format!("| {row} |")),
            "docs/settings.md does not list {row}"
        );
    }
}

/// `docs/attributes.md` is generated from the attribute catalogue and the alert values, and
/// the closed value sets of the alert counter are those of the types the rules emit.
#[test]
fn attributes_doc_matches_catalogue() {
    use gpu_otel_sidecar::catalogue::alert_values::{self, ALERT_VALUES};
    use gpu_otel_sidecar::catalogue::attributes::{self, AlertState, ATTRIBUTES};
    use gpu_otel_sidecar::catalogue::resource::{self, RESOURCE_KEYS};
    let generated = attributes::markdown() + &alert_values::markdown() + &resource::markdown();
    for (_, key) in gpu_otel_sidecar::config::DOWNWARD_API {
        assert!(RESOURCE_KEYS.iter().any(|k| k.key == *key), "{key}");
    }
    let on_disk = super::assert_generated("attributes.md", &generated);
    for key in ATTRIBUTES
        .iter()
        .map(|a| a.key)
        .chain(ALERT_VALUES.iter().map(|v| v.key))
    {
        assert!(on_disk.contains(&format!("| `{key}` |")), "{key}");
    }
    let alerts = RECORDED
        .iter()
        .find(|d| d.name == "nvidia.gpu.alerts")
        .expect("nvidia.gpu.alerts is documented");
    assert!(
        alerts.attributes.contains(&AlertState::doc()),
        "{}",
        alerts.attributes
    );
}
