//! `docs/settings.md` and `docs/otel-variables.md`, generated from the settings tables.

use gpu_otel_sidecar::config::known::settings_markdown;
use gpu_otel_sidecar::config::{otel_variables_markdown, OTEL_VARIABLES};

use super::assert_generated;

#[test]
fn settings_doc_matches_the_tables() {
    let doc = assert_generated("settings.md", &settings_markdown());
    assert!(doc.contains("| `GPU_SIDECAR_SAMPLE_INTERVAL` |"), "{doc}");
}

#[test]
fn otel_variables_doc_matches_the_table() {
    let doc = assert_generated("otel-variables.md", &otel_variables_markdown());
    for v in OTEL_VARIABLES {
        assert!(doc.contains(&format!("`{}`", v.name)), "{}", v.name);
    }
}
