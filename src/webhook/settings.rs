//! The webhook's own settings, in one table ([`SETTINGS`]): name, default, what it accepts
//! and what it does. The README's webhook settings table follows it (a test checks), and
//! the agent's configuration accepts these names ([`is_webhook_setting`]) so that a typo
//! in them is still refused while the names themselves are not.
//!
//! The webhook also reads the agent's logging and OTLP export settings
//! (`GPU_SIDECAR_LOG_*`, `OTEL_*`) through [`crate::config::Config`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::{parse_duration, ConfigError};

/// One setting of the webhook: an environment variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// The variable, e.g. `GPU_SIDECAR_WEBHOOK_ADDR`.
    pub name: &'static str,
    /// Its default as written in the README; `None`: required.
    pub default: Option<&'static str>,
    /// What it accepts, in words (the error message of a bad value says this).
    pub accepts: &'static str,
    /// What it does.
    pub doc: &'static str,
}

/// `GPU_SIDECAR_WEBHOOK_ADDR`: where the HTTPS server listens.
pub const ADDR: Setting = Setting {
    name: "GPU_SIDECAR_WEBHOOK_ADDR",
    default: Some("0.0.0.0:8443"),
    accepts: "an IP address and port such as 0.0.0.0:8443",
    doc: "address of the HTTPS server (`POST /mutate`, `POST /mutate/namespace`, `GET /healthz`, `GET /readyz`)",
};

/// `GPU_SIDECAR_WEBHOOK_TLS_CERT`: the serving certificate chain.
pub const TLS_CERT: Setting = Setting {
    name: "GPU_SIDECAR_WEBHOOK_TLS_CERT",
    default: None,
    accepts: "a readable PEM file with the serving certificate first, then its chain",
    doc: "serving certificate; re-read when the file changes (a renewed certificate is served from the next TLS handshake on, no restart)",
};

/// `GPU_SIDECAR_WEBHOOK_TLS_KEY`: the serving certificate's private key.
pub const TLS_KEY: Setting = Setting {
    name: "GPU_SIDECAR_WEBHOOK_TLS_KEY",
    default: None,
    accepts:
        "a readable PEM file with one private key (PKCS#8, PKCS#1 or SEC1) matching the certificate",
    doc: "its private key; re-read with the certificate",
};

/// `GPU_SIDECAR_WEBHOOK_SIDECAR`: what is injected, as the chart renders it.
pub const SIDECAR: Setting = Setting {
    name: "GPU_SIDECAR_WEBHOOK_SIDECAR",
    default: None,
    accepts: "a readable JSON file as the Helm chart renders it (`sidecar.json` of the webhook's ConfigMap)",
    doc: "the sidecar to inject: its container, pod fields and volumes, rendered by the chart's named templates from its values (image, collector, `mode`, `gpuVisibility`); read at start",
};

/// `GPU_SIDECAR_WEBHOOK_SHUTDOWN_DELAY`: how long the server goes on answering after SIGTERM.
pub const SHUTDOWN_DELAY: Setting = Setting {
    name: "GPU_SIDECAR_WEBHOOK_SHUTDOWN_DELAY",
    default: Some("5s"),
    accepts: "a duration with a unit such as 500ms, 5s or 1m, greater than zero",
    doc: "after SIGTERM the webhook goes on answering this long (`/readyz` says 503) while Kubernetes takes it out of its Service, then finishes the requests in flight and exits",
};

/// Every webhook setting, in README order.
pub const SETTINGS: &[Setting] = &[ADDR, TLS_CERT, TLS_KEY, SIDECAR, SHUTDOWN_DELAY];

/// Whether `name` (a full variable name) is one of the webhook's settings.
pub fn is_webhook_setting(name: &str) -> bool {
    SETTINGS.iter().any(|s| s.name == name)
}

/// The validated webhook settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookSettings {
    /// [`ADDR`].
    pub addr: SocketAddr,
    /// [`TLS_CERT`].
    pub tls_cert: PathBuf,
    /// [`TLS_KEY`].
    pub tls_key: PathBuf,
    /// [`SIDECAR`].
    pub sidecar: PathBuf,
    /// [`SHUTDOWN_DELAY`].
    pub shutdown_delay: Duration,
}

impl WebhookSettings {
    /// Reads the table's variables from `vars` (empty counts as unset). Files are only
    /// named here; the server reads them (and says which variable a bad one came from).
    ///
    /// # Errors
    /// The first [`ConfigError`] found: a required setting unset, or a bad value.
    pub fn from_vars(vars: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let get = |s: &Setting| {
            vars.get(s.name)
                .map(|v| v.trim())
                .filter(|v| !v.is_empty())
                .or(s.default)
        };
        let required = |s: &Setting| {
            get(s).map(PathBuf::from).ok_or_else(|| ConfigError {
                var: s.name.to_string(),
                value: String::new(),
                expected: format!("{} (required by the webhook command)", s.accepts),
            })
        };
        let addr_value = get(&ADDR).unwrap_or_default();
        let addr = addr_value.parse().map_err(|_| ConfigError {
            var: ADDR.name.to_string(),
            value: addr_value.to_string(),
            expected: ADDR.accepts.to_string(),
        })?;
        let shutdown_delay = parse_duration(
            SHUTDOWN_DELAY.name,
            get(&SHUTDOWN_DELAY).unwrap_or_default(),
        )?;
        Ok(Self {
            addr,
            tls_cert: required(&TLS_CERT)?,
            tls_key: required(&TLS_KEY)?,
            sidecar: required(&SIDECAR)?,
            shutdown_delay,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const FILES: [(&str, &str); 3] = [
        ("GPU_SIDECAR_WEBHOOK_TLS_CERT", "/tls/tls.crt"),
        ("GPU_SIDECAR_WEBHOOK_TLS_KEY", "/tls/tls.key"),
        ("GPU_SIDECAR_WEBHOOK_SIDECAR", "/etc/webhook/sidecar.json"),
    ];

    #[test]
    fn defaults_and_required_files() {
        let s = WebhookSettings::from_vars(&vars(&FILES)).unwrap();
        assert_eq!(s.addr, "0.0.0.0:8443".parse().unwrap());
        assert_eq!(s.shutdown_delay, Duration::from_secs(5));
        assert_eq!(s.tls_cert, PathBuf::from("/tls/tls.crt"));
        assert_eq!(s.sidecar, PathBuf::from("/etc/webhook/sidecar.json"));
        for missing in FILES.map(|(k, _)| k) {
            let without: Vec<_> = FILES.into_iter().filter(|(k, _)| *k != missing).collect();
            let e = WebhookSettings::from_vars(&vars(&without)).unwrap_err();
            assert_eq!(e.var, missing);
            assert!(e.expected.contains("required"), "{e}");
        }
    }

    #[test]
    fn bad_values_name_the_variable_and_what_it_accepts() {
        let mut v = vars(&FILES);
        v.insert(ADDR.name.into(), ":8443".into());
        let e = WebhookSettings::from_vars(&v).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid GPU_SIDECAR_WEBHOOK_ADDR=\":8443\": expected an IP address and port such as 0.0.0.0:8443"
        );
        let mut v = vars(&FILES);
        v.insert(SHUTDOWN_DELAY.name.into(), "5".into());
        assert_eq!(
            WebhookSettings::from_vars(&v).unwrap_err().var,
            SHUTDOWN_DELAY.name
        );
        let mut v = vars(&FILES);
        v.insert(ADDR.name.into(), "127.0.0.1:0".into());
        v.insert(SHUTDOWN_DELAY.name.into(), "100ms".into());
        let s = WebhookSettings::from_vars(&v).unwrap();
        assert_eq!(s.addr, "127.0.0.1:0".parse().unwrap());
        assert_eq!(s.shutdown_delay, Duration::from_millis(100));
    }

    #[test]
    fn table_names_are_prefixed_and_unique() {
        let mut names: Vec<_> = SETTINGS.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), SETTINGS.len());
        for s in SETTINGS {
            assert!(s.name.starts_with("GPU_SIDECAR_WEBHOOK_"), "{}", s.name);
            assert!(is_webhook_setting(s.name));
        }
        assert!(!is_webhook_setting("GPU_SIDECAR_WEBHOOK_ADR"));
    }
}
