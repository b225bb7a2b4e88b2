//! Readers of one value shared by several settings: durations, milliseconds, booleans,
//! exporter names, device lists, `key=value` lists. Each error names the variable and what
//! it accepts.

use std::path::PathBuf;
use std::time::Duration;

use super::settings::DURATION;
use super::{ConfigError, DeviceId, DeviceSelection, ExporterKind, OutputTarget};

pub(super) fn output_target(v: &str) -> OutputTarget {
    if v == "-" {
        OutputTarget::Stdout
    } else {
        OutputTarget::Path(PathBuf::from(v))
    }
}

/// Durations are written with a unit: `500ms`, `5s`, `1m` (humantime syntax); zero is refused.
pub fn parse_duration(var: &str, v: &str) -> Result<Duration, ConfigError> {
    match humantime::parse_duration(v.trim()) {
        Ok(d) if !d.is_zero() => Ok(d),
        _ => Err(ConfigError::new(var, v, DURATION)),
    }
}

pub(super) fn parse_millis(var: &str, v: &str) -> Result<Duration, ConfigError> {
    match v.trim().parse::<u64>() {
        Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err(ConfigError::new(
            var,
            v,
            "a whole number of milliseconds greater than zero, such as 10000",
        )),
    }
}

/// A level name (`error` … `trace`, `off`) or directives `target=level`, comma-separated.
/// A bare word that is not a level is refused (tracing would read it as a target name and
/// silently log nothing of ours).
pub(super) fn valid_log_filter(v: &str) -> bool {
    const LEVELS: &[&str] = &["off", "error", "warn", "info", "debug", "trace"];
    let is_level = |s: &str| LEVELS.contains(&s.trim().to_ascii_lowercase().as_str());
    v.split(',').all(|d| match d.split_once('=') {
        None => is_level(d),
        Some((target, level)) => !target.trim().is_empty() && is_level(level),
    }) && tracing_subscriber::EnvFilter::try_new(v).is_ok()
}

pub(super) fn parse_bool(var: &str, v: &str) -> Result<bool, ConfigError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(ConfigError::new(var, v, "true or false")),
    }
}

pub(super) fn parse_exporter(var: &str, v: &str) -> Result<ExporterKind, ConfigError> {
    match v.trim() {
        "otlp" => Ok(ExporterKind::Otlp),
        "console" => Ok(ExporterKind::Console),
        "none" => Ok(ExporterKind::None),
        _ => Err(ConfigError::new(var, v, "otlp, console or none")),
    }
}

pub(super) fn parse_devices(v: &str) -> Result<DeviceSelection, ConfigError> {
    let expected = "all, pod-resources, or a comma-separated list of NVML indices and GPU-/MIG- UUIDs such as 0,GPU-8f6c…";
    let v = v.trim();
    if v == "all" {
        return Ok(DeviceSelection::All);
    }
    if v == "pod-resources" {
        return Ok(DeviceSelection::PodResources);
    }
    let mut ids = Vec::new();
    for item in v.split(',').map(str::trim) {
        if let Ok(i) = item.parse::<u32>() {
            ids.push(DeviceId::Index(i));
        } else if (item.starts_with("GPU-") || item.starts_with("MIG-")) && item.len() > 4 {
            ids.push(DeviceId::Uuid(item.to_string()));
        } else {
            return Err(ConfigError::new("GPU_SIDECAR_DEVICES", v, expected));
        }
    }
    Ok(DeviceSelection::List(ids))
}

/// Parses the W3C-baggage-like `key=value,key2=value2` lists of `OTEL_RESOURCE_ATTRIBUTES`
/// and `OTEL_EXPORTER_OTLP_HEADERS`; values are percent-decoded. With `secret`, the value
/// in an error is redacted.
pub(super) fn parse_key_values(
    var: &str,
    v: &str,
    secret: bool,
) -> Result<Vec<(String, String)>, ConfigError> {
    let shown = if secret { "<redacted>" } else { v };
    let mut out = Vec::new();
    for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((k, val)) = item.split_once('=') else {
            return Err(ConfigError::new(
                var,
                shown,
                "a comma-separated list of key=value pairs",
            ));
        };
        let k = k.trim();
        if k.is_empty() {
            return Err(ConfigError::new(
                var,
                shown,
                "a comma-separated list of key=value pairs with non-empty keys",
            ));
        }
        let val = percent_encoding::percent_decode_str(val.trim())
            .decode_utf8()
            .map_err(|_| ConfigError::new(var, shown, "percent-encoded UTF-8 values"))?;
        out.push((k.to_string(), val.into_owned()));
    }
    Ok(out)
}
