//! `docs/metrics.md` is generated from the catalogue; this test fails when they disagree.
//! Regenerate with `UPDATE_DOCS=1 cargo test --test metrics_doc`.

use gpu_otel_sidecar::catalogue::metrics::{
    markdown, CATALOGUE, POD_CATALOGUE, RECORDED, SELF_METRICS,
};

#[test]
fn metrics_doc_matches_catalogue() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/metrics.md");
    let generated = markdown();
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "docs/metrics.md differs from the catalogue; run UPDATE_DOCS=1 cargo test --test metrics_doc"
    );
    for def in CATALOGUE {
        assert!(on_disk.contains(&format!(
            "| `{}` | {} | `{}` |",
            def.name,
            def.instrument.as_str(),
            def.unit
        )));
    }
    for def in POD_CATALOGUE {
        assert!(on_disk.contains(&format!(
            "| `{}` | {} | `{}` |",
            def.name,
            def.instrument.as_str(),
            def.unit
        )));
    }
    for def in RECORDED.iter().chain(SELF_METRICS) {
        assert!(on_disk.contains(&format!(
            "| `{}` | {} | `{}` |",
            def.name,
            def.instrument.as_str(),
            def.unit
        )));
    }
}

#[test]
fn catalogue_names_are_unique_and_namespaced() {
    let mut names: Vec<_> = CATALOGUE
        .iter()
        .map(|d| d.name)
        .chain(POD_CATALOGUE.iter().map(|d| d.name))
        .chain(RECORDED.iter().chain(SELF_METRICS).map(|d| d.name))
        .collect();
    names.sort_unstable();
    let before = names.len();
    names.dedup();
    assert_eq!(before, names.len(), "duplicate metric name");
    for n in names {
        assert!(
            n.starts_with("hw.") || n.starts_with("nvidia.gpu.") || n.starts_with("gpu_sidecar."),
            "{n} is outside hw.*, nvidia.gpu.* and the agent's own gpu_sidecar.*"
        );
    }
}

/// Wherever the docs show the NVML index, they say it is not the trainer's `cuda:N` and
/// point at the UUID and the PCI bus id.
#[test]
fn every_index_is_explained() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &str| {
        std::fs::read_to_string(root.join(p))
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", root.join(p).display()))
    };
    assert!(read("docs/kubernetes.md").contains("### Which GPU is it"));
    let run_report = read("docs/run-report.md");
    for place in [
        "`gpu_index` (`nvidia-smi`'s index, not the trainer's `cuda:N`",
        "Each GPU's `index` is `nvidia-smi`'s, not the trainer's `cuda:N`",
    ] {
        assert!(run_report.contains(place), "docs/run-report.md: {place}");
    }
    let note = "`nvidia.gpu.index` (NVML's node-wide index as `nvidia-smi` numbers GPUs, not the training process's `cuda:N`: match GPUs by `hw.id` (UUID) or `nvidia.gpu.pci.bus_id`)";
    assert!(read("docs/metrics.md").contains(note), "docs/metrics.md");
    assert!(read("docs/events.md").contains(note), "docs/events.md");
}
