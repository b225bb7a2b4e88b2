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

/// Every `GPU_SIDECAR_*` name the project's scripts, CI, packaging, benchmarks and docs use
/// is a setting of the agent (the agent refuses any other: a script reading one, exported
/// in a user's shell, made both README commands exit 2), and the integration tests read
/// none (they may set unknown ones, to test the refusal). Names of the scripts' and tests'
/// own variables start with `GPU_OTEL_SIDECAR_`, outside the agent's prefix.
#[test]
fn scripts_and_docs_use_only_names_the_agent_knows() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    fn files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            out.push(dir.to_path_buf());
            return;
        };
        for e in entries {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if name == "fixtures" || name == "scenarios" || name == "__pycache__" {
                continue;
            }
            if p.is_dir() {
                files(&p, out);
            } else {
                out.push(p);
            }
        }
    }
    // A name: the prefix and at least one more word, not a pattern (`GPU_SIDECAR_RULE_*`,
    // `GPU_SIDECAR_RULE_<NAME>_…`, `…_{ENABLED,DURATION}`).
    let names = |text: &str| -> Vec<String> {
        let mut found = Vec::new();
        let mut rest = text;
        while let Some(i) = rest.find(PREFIX) {
            let before = rest[..i].chars().next_back();
            let tail = &rest[i..];
            let end = tail
                .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                .unwrap_or(tail.len());
            let next = tail[end..].chars().next();
            let name = &tail[..end];
            let pattern = name.ends_with('_') || matches!(next, Some('*' | '{' | '<' | '…'));
            if !pattern && !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                found.push(name.to_string());
            }
            rest = &tail[end.max(1)..];
        }
        found
    };
    let mut everywhere = Vec::new();
    for dir in [
        "scripts",
        ".ci",
        "tests/packaging",
        "docker",
        "helm",
        "benches",
        "docs",
        "Dockerfile",
        "README.md",
        "DEVELOPERS.md",
    ] {
        if root.join(dir).exists() {
            files(&root.join(dir), &mut everywhere);
        }
    }
    let mut unknown = Vec::new();
    for path in &everywhere {
        let Ok(text) = std::fs::read_to_string(path) else {
            continue; // not text
        };
        for name in names(&text) {
            if !known::is_known(&name) {
                unknown.push(format!(
                    "{}: {name}",
                    path.strip_prefix(root).unwrap().display()
                ));
            }
        }
    }
    // The Rust integration tests: what they read from their own environment.
    let mut tests = Vec::new();
    files(&root.join("tests"), &mut tests);
    for path in tests
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
    {
        let text = std::fs::read_to_string(path).unwrap();
        for read in ["var(\"", "var_os(\""] {
            for (i, _) in text.match_indices(read) {
                let name: String = text[i + read.len()..]
                    .chars()
                    .take_while(|c| *c != '"')
                    .collect();
                if name.starts_with(PREFIX) && !known::is_known(&name) {
                    unknown.push(format!(
                        "{} reads {name}",
                        path.strip_prefix(root).unwrap().display()
                    ));
                }
            }
        }
    }
    assert!(everywhere.len() > 40, "{everywhere:?}");
    assert!(
        unknown.is_empty(),
        "GPU_SIDECAR_* names the agent does not know (it refuses them; a script's own variable is GPU_OTEL_SIDECAR_*):\n{}",
        unknown.join("\n")
    );
}
