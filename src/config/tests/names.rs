//! Tests of the settings' names: the table, the unknown-name check, `--help`'s list and
//! `docs/settings.md`.

use super::*;

#[test]
fn unknown_own_setting_is_refused() {
    let e = cfg(&[("GPU_SIDECAR_SAMPEL_INTERVAL", "5s")]).unwrap_err();
    assert_eq!(e.var, "GPU_SIDECAR_SAMPEL_INTERVAL");
    assert_eq!(
        e.problem,
        ConfigProblem::NoSuchSetting {
            nearest: Some("GPU_SIDECAR_SAMPLE_INTERVAL".into())
        }
    );
}

/// The refusal of an unknown name reads as a sentence about the name (not as "invalid …:
/// expected no such setting", which read like a bug), with and without a close match.
#[test]
fn an_unknown_name_is_refused_in_a_sentence() {
    let e = cfg(&[("GPU_SIDECAR_SAMPLE_INTERVALL", "1s")]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "GPU_SIDECAR_SAMPLE_INTERVALL is not a setting; did you mean GPU_SIDECAR_SAMPLE_INTERVAL? (gpu-otel-sidecar --help lists every setting)"
    );
    let e = cfg(&[("GPU_SIDECAR_COLOUR", "blue")]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "GPU_SIDECAR_COLOUR is not a setting, and no setting has a name close to it; every GPU_SIDECAR_* variable must be one (gpu-otel-sidecar --help lists them)"
    );
    for e in [
        cfg(&[("GPU_SIDECAR_SAMPLE_INTERVALL", "1s")]).unwrap_err(),
        cfg(&[("GPU_SIDECAR_COLOUR", "blue")]).unwrap_err(),
    ] {
        let line = e.to_string();
        assert!(!line.contains("expected"), "{line}");
        assert!(!line.contains("invalid"), "{line}");
        assert!(
            !line.contains("blue"),
            "the value is not the problem: {line}"
        );
    }
}

#[test]
fn webhook_settings_are_known() {
    let mut vars: Vec<(&str, &str)> = settings::SETTINGS
        .iter()
        .filter(|s| s.component == settings::Component::Webhook)
        .map(|s| (s.name, "x"))
        .collect();
    assert!(cfg(&vars).is_ok());
    vars.push(("GPU_SIDECAR_WEBHOOK_TLS_CRT", "/tls/tls.crt"));
    let e = cfg(&vars).unwrap_err();
    assert_eq!(e.var, "GPU_SIDECAR_WEBHOOK_TLS_CRT");
    assert!(
        e.to_string()
            .contains("did you mean GPU_SIDECAR_WEBHOOK_TLS_CERT?"),
        "{e}"
    );
}

#[test]
fn a_misspelled_setting_gets_the_nearest_name() {
    for (typo, meant) in [
        ("GPU_SIDECAR_SAMPEL_INTERVAL", "GPU_SIDECAR_SAMPLE_INTERVAL"),
        (
            "GPU_SIDECAR_SAMPLE_INTERVALL",
            "GPU_SIDECAR_SAMPLE_INTERVAL",
        ),
        ("GPU_SIDECAR_DEVICE", "GPU_SIDECAR_DEVICES"),
        ("GPU_SIDECAR_HEALTH_ADRESS", "GPU_SIDECAR_HEALTH_ADDR"),
        ("GPU_SIDECAR_SAMPLELOG", "GPU_SIDECAR_SAMPLE_LOG"),
        (
            "GPU_SIDECAR_RULE_MEMORY_LEAK_TRESHOLD",
            "GPU_SIDECAR_RULE_MEMORY_LEAK_THRESHOLD",
        ),
        (
            "GPU_SIDECAR_ENERGY_INTERVALS",
            "GPU_SIDECAR_ENERGY_INTERVAL",
        ),
    ] {
        let e = cfg(&[(typo, "1")]).unwrap_err();
        assert_eq!(e.var, typo);
        assert_eq!(
            e.problem,
            ConfigProblem::NoSuchSetting {
                nearest: Some(meant.into())
            },
            "{typo}: {e}"
        );
        assert!(
            e.to_string()
                .contains(&format!("; did you mean {meant}? (")),
            "{typo}: {e}"
        );
        assert!(e.to_string().len() < 200, "one short line: {e}");
    }
    let e = cfg(&[("GPU_SIDECAR_COLOUR", "1")]).unwrap_err();
    assert_eq!(e.problem, ConfigProblem::NoSuchSetting { nearest: None });
    assert!(!e.to_string().contains("did you mean"), "{e}");
    assert!(e.to_string().contains("--help"), "{e}");
}

#[test]
fn rule_settings_are_known_from_the_rule_table() {
    let from_table: Vec<String> = RULES
        .iter()
        .flat_map(|r| {
            r.setting_suffixes()
                .into_iter()
                .map(move |s| format!("GPU_SIDECAR_RULE_{}_{s}", r.env))
        })
        .collect();
    assert!(from_table.len() > 30, "{from_table:?}");
    for name in &from_table {
        assert!(known::is_known(name), "{name}");
    }
    assert!(!known::is_known("GPU_SIDECAR_RULE_GPU_LOST_DURATION"));
    assert!(!known::is_known("GPU_SIDECAR_RULE_COFFEE_ENABLED"));
}

#[test]
fn settings_table_rows_are_consistent() {
    let mut names: Vec<_> = settings::SETTINGS.iter().map(|s| s.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), settings::SETTINGS.len());
    let unset = cfg(&[]).unwrap();
    for s in settings::SETTINGS {
        assert!(s.name.starts_with(PREFIX), "{}", s.name);
        assert_eq!(
            s.name.starts_with("GPU_SIDECAR_WEBHOOK_"),
            s.component == settings::Component::Webhook,
            "{}",
            s.name
        );
        if let (settings::Component::Agent, Some(v)) = (s.component, s.default_value()) {
            assert_eq!(cfg(&[(s.name, v)]).unwrap(), unset, "{}={v}", s.name);
        }
    }
    assert_eq!(unset.sample_log, None);
    assert_eq!(
        cfg(&[("GPU_SIDECAR_SAMPLE_LOG", "-")])
            .unwrap()
            .sample_log
            .unwrap()
            .max_bytes,
        100 * 1024 * 1024
    );
}

#[test]
fn help_names_the_webhook_settings_and_the_honoured_otel_variables() {
    let help = known::settings_help();
    for s in settings::SETTINGS {
        assert!(help.contains(s.name), "{}: {help}", s.name);
    }
    for v in OTEL_VARIABLES
        .iter()
        .filter(|v| v.used == OtelUse::Honoured)
    {
        assert!(help.contains(v.name), "{}: {help}", v.name);
    }
    assert!(
        help.contains("GPU_SIDECAR_RULE_XID_{ENABLED,DURATION}"),
        "{help}"
    );
    assert!(!help.contains("OTEL_TRACES"), "{help}");
    assert!(help.lines().all(|l| l.len() <= 100), "{help}");
}

#[test]
fn settings_doc_matches_the_tables() {
    assert_generated_doc(
        "docs/settings.md",
        &known::settings_markdown(),
        "settings_doc",
    );
}
