//! `docs/metrics.md` is generated from the catalogue; this test fails when they disagree.
//! Regenerate with `UPDATE_DOCS=1 cargo test --test docs`. Also the checks of every
//! doc against the repository (links and anchors, shell commands, the README's thread
//! table) and of the agent's log lines (no Debug text).

use gpu_otel_sidecar::catalogue::metrics::{
    markdown, H200Series, CATALOGUE, POD_CATALOGUE, RECORDED, SELF_METRICS,
};

/// The H200 export's series counts as `tests/agent/e2e.rs` measured and kept them.
fn h200_series() -> H200Series {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/h200-series.json");
    let kept: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let count = |k: &str| {
        kept[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k} in {path:?}")) as usize
    };
    H200Series {
        default: count("default"),
        detail: count("detail"),
    }
}

#[test]
fn metrics_doc_matches_catalogue() {
    let on_disk = super::assert_generated("metrics.md", &markdown(h200_series()));
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

/// Every file under `dir` whose name ends with `.<ext>`, sorted; hidden directories,
/// `target/` and `node_modules/` left out.
fn files_under(dir: &std::path::Path, ext: &str) -> Vec<std::path::PathBuf> {
    fn walk(dir: &std::path::Path, ext: &str, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if name.starts_with('.') || name == "target" || name == "node_modules" {
                continue;
            }
            if p.is_dir() {
                walk(&p, ext, out);
            } else if p.extension().is_some_and(|e| e == ext) {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, ext, &mut out);
    out.sort();
    out
}

/// Every Markdown file of the repository (README, docs/, the chart's README, the mock's and
/// the fixture's).
fn markdown_files(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    files_under(root, "md")
}

/// The text outside fenced code blocks and inline code spans (where `[x](y)` is not a link).
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            out.push('\n');
            continue;
        }
        if !fenced {
            let mut in_code = false;
            for c in line.chars() {
                if c == '`' {
                    in_code = !in_code;
                } else if !in_code {
                    out.push(c);
                }
            }
        }
        out.push('\n');
    }
    out
}

/// GitHub's anchors of a Markdown file's headings: lower case, punctuation dropped (letters,
/// digits, `-` and `_` kept), spaces to `-`, a repeated one suffixed `-1`, `-2`, …
fn anchors(text: &str) -> std::collections::BTreeSet<String> {
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    let mut out = std::collections::BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        if fenced {
            continue;
        }
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        // Link text stays, its target goes: "[a](b)" -> "a".
        let mut plain = String::new();
        let mut rest = heading;
        while let Some(i) = rest.find("](") {
            plain.push_str(&rest[..i]);
            rest = &rest[i + 2..];
            rest = &rest[rest.find(')').map_or(rest.len(), |j| j + 1)..];
        }
        plain.push_str(rest);
        let slug: String = plain
            .trim()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .flat_map(char::to_lowercase)
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        out.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    out
}

/// Every relative link of every Markdown file (README, docs/ with the generated ones, the
/// chart's README) names a file or directory that exists and, with `#anchor`, a heading
/// of that file; and no doc points at "the README" in words instead of by a link (the
/// sections such prose meant had moved to docs/).
#[test]
fn links_and_anchors_resolve() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = markdown_files(root);
    let names: Vec<String> = files
        .iter()
        .map(|f| f.strip_prefix(root).unwrap().display().to_string())
        .collect();
    for needed in [
        "README.md",
        "docs/metrics.md",
        "helm/gpu-otel-sidecar/README.md",
    ] {
        assert!(
            names.iter().any(|n| n == needed),
            "{needed} not found: {names:?}"
        );
    }
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let name = file.strip_prefix(root).unwrap().display().to_string();
        let text = std::fs::read_to_string(file).unwrap();
        let prose = prose(&text);
        for (i, _) in prose.match_indices("](") {
            let tail = &prose[i + 2..];
            let Some(end) = tail.find(')') else { continue };
            let target = tail[..end].split_whitespace().next().unwrap_or("");
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            if !resolved.exists() {
                broken.push(format!("{name}: {target} (no such file)"));
                continue;
            }
            if !anchor.is_empty() && resolved.extension().is_some_and(|e| e == "md") {
                let there = anchors(&std::fs::read_to_string(&resolved).unwrap());
                if !there.contains(anchor) {
                    broken.push(format!("{name}: {target} (no heading #{anchor} there)"));
                }
            }
        }
        if name != "README.md" {
            // "see the README, Shared GPUs": a pointer in words, not a link.
            let mut without_links = String::new();
            let mut rest = prose.as_str();
            while let Some(open) = rest.find('[') {
                without_links.push_str(&rest[..open]);
                let after = &rest[open..];
                match after.find("](").zip(after.find(')')) {
                    Some((mid, close)) if mid < close => rest = &after[close + 1..],
                    _ => {
                        without_links.push('[');
                        rest = &after[1..];
                    }
                }
            }
            without_links.push_str(rest);
            for line in without_links.lines().filter(|l| l.contains("README")) {
                broken.push(format!("{name}: names a README without linking it: {line}"));
            }
        }
    }
    assert!(checked > 50, "only {checked} links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// Every thread the agent and the webhook name (`std::thread::Builder::name`, the tokio
/// runtimes' `thread_name`, the bounded shutdown threads, each `ConsumerThread`), the main
/// thread and the SDK's events batch processor (the names in the text logs) is a row of the
/// README's thread table, and every row is such a thread.
#[test]
fn readme_thread_table_lists_every_thread() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let first_string = |s: &str| -> Option<String> {
        let s = s.trim_start();
        let s = s.strip_prefix('"')?;
        Some(s[..s.find('"')?].to_string())
    };
    let mut threads = std::collections::BTreeSet::from(["main".to_string()]);
    for (_, text) in agent_sources() {
        for call in [
            ".name(",
            ".thread_name(",
            "run_bounded(",
            "ConsumerThread::start(",
        ] {
            for (i, _) in text.match_indices(call) {
                if let Some(name) = first_string(&text[i + call.len()..]) {
                    threads.insert(name);
                }
            }
        }
    }
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let table: std::collections::BTreeSet<String> = readme
        .lines()
        .skip_while(|l| !l.starts_with("| thread | what it does |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .flat_map(|row| {
            let cell = row.split('|').nth(1).unwrap_or("").to_string();
            cell.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    // The scan found the agent's threads (12 when the events left the SDK's logs pipeline).
    assert!(threads.len() >= 12, "{threads:?}");
    assert_eq!(
        table, threads,
        "the README's thread table (left) and the threads the code names (right)"
    );
}

/// The shell commands of the docs run as pasted: no `<placeholder>` (a shell reads
/// `--set image.repository=<registry>/x` as a redirection from a file named `registry`);
/// a value the reader must choose is a variable set on the line before. And they leave no
/// file in the checkout: the settings that write files (`GPU_SIDECAR_REPORT_FILE`,
/// `GPU_SIDECAR_SAMPLE_LOG`) are `-` or an absolute path (the run-report example wrote
/// `gpu-samples.csv` into the checkout).
#[test]
fn shell_blocks_have_no_angle_bracket_placeholders() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for file in markdown_files(root) {
        let name = file.strip_prefix(root).unwrap().display().to_string();
        let text = std::fs::read_to_string(&file).unwrap();
        let mut fence: Option<String> = None;
        // An indented code block starts after a blank line, outside a list item (an indented
        // line in a list item is the item's text).
        let mut in_list = false;
        let mut indented_block = false;
        let mut previous_blank = true;
        for (n, line) in text.lines().enumerate() {
            if let Some(info) = line.trim_start().strip_prefix("```") {
                fence = match fence {
                    Some(_) => None,
                    None => Some(info.trim().to_string()),
                };
                continue;
            }
            let blank = line.trim().is_empty();
            let indented = line.starts_with("    ");
            if fence.is_none() && !blank && !indented {
                let t = line.trim_start();
                in_list = t.starts_with(['-', '*', '+'])
                    || t.split_once(". ").is_some_and(|(d, _)| {
                        !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())
                    });
            }
            indented_block = fence.is_none()
                && indented
                && !in_list
                && (indented_block || previous_blank)
                && !line.trim_start().starts_with(['-', '*', '|']);
            previous_blank = blank;
            let shell = match &fence {
                Some(lang) => ["sh", "bash", "shell", "console", ""].contains(&lang.as_str()),
                None => indented_block,
            };
            if !shell {
                continue;
            }
            let code = line.split(" #").next().unwrap_or("");
            if code.trim_start().starts_with('#') {
                continue;
            }
            for writes in ["GPU_SIDECAR_REPORT_FILE=", "GPU_SIDECAR_SAMPLE_LOG="] {
                for (i, _) in code.match_indices(writes) {
                    let value = code[i + writes.len()..].trim_start_matches(['"', '\'']);
                    if !(value.starts_with('-') || value.starts_with('/') || value.starts_with('$'))
                    {
                        found.push(format!(
                            "{name}:{}: writes into the checkout: {}",
                            n + 1,
                            line.trim()
                        ));
                    }
                }
            }
            let mut rest = code;
            while let Some(i) = rest.find('<') {
                let tail = &rest[i + 1..];
                let word: String = tail
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                    .collect();
                if !word.is_empty() && tail[word.len()..].starts_with('>') {
                    found.push(format!("{name}:{}: {}", n + 1, line.trim()));
                    break;
                }
                rest = tail;
            }
        }
    }
    assert!(
        found.is_empty(),
        "placeholders in shell commands:\n{}",
        found.join("\n")
    );
}

/// The agent's Rust sources (`src/**/*.rs`) without their tests: each file's path relative
/// to the repository and its text up to its `#[cfg(test)] mod tests { … }` (files of tests,
/// `tests.rs`, `tests_*.rs`, `tests/`, left out).
fn agent_sources() -> Vec<(String, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    files_under(&root.join("src"), "rs")
        .into_iter()
        .filter_map(|file| {
            let name = file.strip_prefix(root).unwrap().display().to_string();
            if name.contains("tests") {
                return None;
            }
            let mut text = std::fs::read_to_string(&file).unwrap();
            if let Some(i) = text.find("#[cfg(test)]\nmod tests {") {
                text.truncate(i);
            }
            Some((name, text))
        })
        .collect()
}

/// The source of every `tracing::{error,warn,info,debug,trace}!` call in `src/` (tests
/// left out), each with its file and line.
fn log_calls() -> Vec<(String, String)> {
    let mut calls = Vec::new();
    for (name, text) in agent_sources() {
        for level in ["error", "warn", "info", "debug", "trace"] {
            let open = format!("tracing::{level}!(");
            for (start, _) in text.match_indices(&open) {
                // The macro's arguments: up to the matching parenthesis, strings skipped.
                let body = &text[start + open.len()..];
                let (mut depth, mut end, mut chars) = (1, 0, body.char_indices());
                while let Some((i, c)) = chars.next() {
                    match c {
                        '(' => depth += 1,
                        ')' => depth -= 1,
                        '"' => {
                            while let Some((_, c)) = chars.next() {
                                match c {
                                    '\\' => {
                                        chars.next();
                                    }
                                    '"' => break,
                                    _ => {}
                                }
                            }
                        }
                        _ => {}
                    }
                    if depth == 0 {
                        end = i;
                        break;
                    }
                }
                let line = text[..start].lines().count();
                calls.push((format!("{name}:{line}"), body[..end].to_string()));
            }
        }
    }
    calls
}

/// The agent's log lines are read by people: no value in them is Rust's `Debug` text
/// (`Uuid("GPU-…")`, `[SmOccupancy, …]`, `Grpc`, `Some(…)`). A field is written with
/// `%` (Display) or as a plain value, never with `?`; a message never uses `{:?}`
/// (durations go through `humantime::format_duration`). A GPM line printed Rust enum
/// names, and others device ids and protocol names, before this test.
#[test]
fn log_lines_carry_no_debug_formatting() {
    let calls = log_calls();
    assert!(calls.len() > 100, "{} log calls found", calls.len());
    let mut found = Vec::new();
    for (at, body) in &calls {
        let debug_field = body.split(',').any(|arg| {
            let arg = arg.trim();
            arg.starts_with('?')
                || arg
                    .split_once('=')
                    .is_some_and(|(_, v)| v.trim().starts_with('?'))
        });
        if debug_field || body.contains(":?}") || body.contains(":#?}") {
            found.push(format!(
                "{at}: {}",
                body.split_whitespace().collect::<Vec<_>>().join(" ")
            ));
        }
    }
    assert!(
        found.is_empty(),
        "Debug formatting in log lines:\n{}",
        found.join("\n")
    );
}
