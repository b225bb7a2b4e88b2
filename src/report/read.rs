//! Reading a run report back (the `report` and `compare` commands): the file
//! `GPU_SIDECAR_REPORT_FILE` wrote (one JSON object), or a capture of stdout holding the
//! report's line among OTLP/JSON lines (the line that starts with
//! `{"event.name":"gpu.run.report"`).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::summary::EVENT_NAME;

/// A file the commands cannot use; the message names the file and what is wrong, on one
/// line (the commands exit 2 with it).
#[derive(Debug, thiserror::Error)]
#[error("{}: {what}", path.display())]
pub struct InputError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub what: String,
}

impl InputError {
    /// An error about `path`.
    pub fn new(path: &Path, what: impl Into<String>) -> Self {
        Self {
            path: path.to_owned(),
            what: what.into().replace('\n', " "),
        }
    }
}

/// The run report in `path`, as JSON.
///
/// # Errors
/// The file cannot be read, is not JSON, or is not a run report (`"event.name"` is not
/// `gpu.run.report`, or it has no `pod` object or no `gpus` array).
pub fn load_report(path: &Path) -> Result<Value, InputError> {
    let text = std::fs::read_to_string(path).map_err(|e| InputError::new(path, e.to_string()))?;
    let value: Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            let prefix = format!("{{\"event.name\":\"{EVENT_NAME}\"");
            let line = text
                .lines()
                .find(|l| l.trim_start().starts_with(&prefix))
                .filter(|l| l.trim() != text.trim());
            match line.map(serde_json::from_str::<Value>) {
                Some(Ok(v)) => v,
                Some(Err(e)) => {
                    return Err(InputError::new(
                        path,
                        format!("the {EVENT_NAME} line is not valid JSON: {e}"),
                    ))
                }
                None => return Err(InputError::new(path, format!("not JSON: {e}"))),
            }
        }
    };
    if value.get("event.name").and_then(Value::as_str) != Some(EVENT_NAME) {
        return Err(InputError::new(
            path,
            format!("not a run report (no \"event.name\": \"{EVENT_NAME}\")"),
        ));
    }
    if !value.get("pod").is_some_and(Value::is_object) {
        return Err(InputError::new(
            path,
            "a run report without a \"pod\" summary",
        ));
    }
    if !value.get("gpus").is_some_and(Value::is_array) {
        return Err(InputError::new(
            path,
            "a run report without a \"gpus\" array",
        ));
    }
    Ok(value)
}

/// An RFC 3339 time of the report (`started_at`, `ended_at`, an event's `time`).
pub fn time(v: &Value) -> Option<std::time::SystemTime> {
    v.as_str().and_then(|s| humantime::parse_rfc3339(s).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_file_a_stdout_capture_and_what_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let report = r#"{"event.name":"gpu.run.report","pod":{"energy_j":1.5},"gpus":[]}"#;
        let v = load_report(&write("r.json", report)).unwrap();
        assert_eq!(v["pod"]["energy_j"], 1.5);
        let capture = format!("{{\"resourceMetrics\":[]}}\n{report}\n{{\"resourceLogs\":[]}}\n");
        let v = load_report(&write("stdout.txt", &capture)).unwrap();
        assert_eq!(v["pod"]["energy_j"], 1.5);

        let err = |name: &str, text: &str| load_report(&write(name, text)).unwrap_err().to_string();
        assert!(err("a.json", "{\"pod\":").contains("a.json: not JSON: EOF"));
        assert!(err("b.json", "{\"event.name\":\"x\"}").contains("not a run report"));
        assert!(
            err("c.json", "{\"event.name\":\"gpu.run.report\",\"gpus\":[]}").contains("\"pod\"")
        );
        let missing = load_report(&dir.path().join("none.json"))
            .unwrap_err()
            .to_string();
        assert!(missing.contains("none.json: No such file"), "{missing}");
        assert!(!missing.contains('\n'));
    }
}
