//! The webhook's own settings, read through their rows of the settings table
//! ([`crate::config::settings::SETTINGS`], component `Webhook`): name, default, what it
//! accepts and what it does; `docs/settings.md` lists them (generated from the table), and
//! the agent's configuration accepts these names so that a typo in them is still refused
//! while the names themselves are not.
//!
//! The webhook also reads the agent's logging and OTLP export settings
//! (`GPU_SIDECAR_LOG_*`, `OTEL_*`) through [`crate::config::Config`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use crate::config::settings::{
    Setting, WEBHOOK_ADDR as ADDR, WEBHOOK_SHUTDOWN_DELAY as SHUTDOWN_DELAY,
    WEBHOOK_SIDECAR as SIDECAR, WEBHOOK_TLS_CERT as TLS_CERT, WEBHOOK_TLS_KEY as TLS_KEY,
};
use crate::config::{parse_duration, ConfigError};

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
                .or(s.default_value())
        };
        let required = |s: &Setting| {
            get(s).map(PathBuf::from).ok_or_else(|| {
                ConfigError::new(
                    s.name,
                    "",
                    format!("{} (required by the webhook command)", s.accepts),
                )
            })
        };
        let addr_value = get(&ADDR).unwrap_or_default();
        let addr = addr_value
            .parse()
            .map_err(|_| ConfigError::new(ADDR.name, addr_value, ADDR.accepts))?;
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
            // Unset reads as unset, not as an invalid empty value.
            assert!(
                e.to_string()
                    .starts_with(&format!("{missing} is not set: expected ")),
                "{e}"
            );
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
}
