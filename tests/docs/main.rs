//! The generated docs and the checks of every doc against the repository, in one test
//! executable. Each generated doc is compared with what the code generates now; a test fails
//! when they disagree, and `UPDATE_DOCS=1 cargo test --test docs` regenerates all of them:
//! - `docs/metrics.md` from the metric catalogue (`src/catalogue/metrics/`), with the valid
//!   ranges of `src/sampling/bounds.rs`;
//! - `docs/events.md` from the event catalogue (`src/catalogue/events.rs`) and the rule
//!   table (`src/rules/catalogue.rs`);
//! - `docs/attributes.md` from the attribute catalogue (`src/catalogue/attributes.rs`);
//! - `docs/settings.md` from the settings tables (`src/config/known.rs`);
//! - `docs/otel-variables.md` from the `OTEL_*` table (`src/config/otel.rs`).

mod events;
mod metrics;
mod settings;

/// Compares `docs/<name>` with `generated`, after writing it there when `UPDATE_DOCS` is set.
///
/// # Panics
/// When the file on disk differs from `generated` (or cannot be read), naming the command
/// that regenerates it.
pub fn assert_generated(name: &str, generated: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs")
        .join(name);
    if std::env::var_os("UPDATE_DOCS").is_some() {
        // Written aside and renamed, so that the other tests, reading the docs at the same
        // time, never see a half-written page.
        let aside = path.with_extension("md.new");
        std::fs::write(&aside, generated).unwrap();
        std::fs::rename(&aside, &path).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "docs/{name} differs from the code it is generated from; run UPDATE_DOCS=1 cargo test --test docs"
    );
    on_disk
}
