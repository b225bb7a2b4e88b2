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
use std::time::{Duration, SystemTime};

use super::inject::Reinvocation;
pub use crate::config::settings::{
    Setting, WEBHOOK_ADDR as ADDR, WEBHOOK_CERT_VALIDITY as CERT_VALIDITY,
    WEBHOOK_CONFIGURATION as CONFIGURATION, WEBHOOK_REINVOCATION_POLICY as REINVOCATION_POLICY,
    WEBHOOK_RESYNC_INTERVAL as RESYNC_INTERVAL, WEBHOOK_ROTATION_OVERLAP as ROTATION_OVERLAP,
    WEBHOOK_SECRET_POLL_INTERVAL as SECRET_POLL_INTERVAL,
    WEBHOOK_SERVICE_ACCOUNT_DIR as SERVICE_ACCOUNT_DIR, WEBHOOK_SHUTDOWN_DELAY as SHUTDOWN_DELAY,
    WEBHOOK_SIDECAR as SIDECAR, WEBHOOK_TLS_CERT as TLS_CERT, WEBHOOK_TLS_KEY as TLS_KEY,
    WEBHOOK_TLS_SECRET as TLS_SECRET,
};
use crate::config::{parse_duration, ConfigError};

/// Where the serving certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsSource {
    /// [`TLS_CERT`] and [`TLS_KEY`]: files, re-read when they change.
    Files {
        /// [`TLS_CERT`].
        cert: PathBuf,
        /// [`TLS_KEY`].
        key: PathBuf,
    },
    /// [`TLS_SECRET`]: the webhook keeps its own (see [`super::managed`]).
    Managed(ManagedSettings),
}

/// The settings of a certificate the webhook keeps itself ([`TLS_SECRET`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedSettings {
    /// [`TLS_SECRET`].
    pub secret: String,
    /// [`CONFIGURATION`].
    pub configuration: String,
    /// [`SERVICE_ACCOUNT_DIR`].
    pub service_account_dir: PathBuf,
    /// `https://<KUBERNETES_SERVICE_HOST>:<KUBERNETES_SERVICE_PORT>`.
    pub api_server: String,
    /// [`CERT_VALIDITY`].
    pub validity: Duration,
    /// [`RESYNC_INTERVAL`].
    pub resync: Duration,
    /// [`SECRET_POLL_INTERVAL`].
    pub poll: Duration,
    /// [`ROTATION_OVERLAP`].
    pub overlap: Duration,
}

/// The validated webhook settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookSettings {
    /// [`ADDR`].
    pub addr: SocketAddr,
    /// The serving certificate.
    pub tls: TlsSource,
    /// [`SIDECAR`].
    pub sidecar: PathBuf,
    /// [`SHUTDOWN_DELAY`].
    pub shutdown_delay: Duration,
    /// [`REINVOCATION_POLICY`].
    pub reinvocation: Reinvocation,
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
        let tls = match get(&TLS_SECRET) {
            None => TlsSource::Files {
                cert: required(&TLS_CERT).map_err(|mut e| {
                    e.expected = format!(
                        "{} (required by the webhook command, unless {} is set)",
                        TLS_CERT.accepts, TLS_SECRET.name
                    );
                    e
                })?,
                key: required(&TLS_KEY)?,
            },
            Some(secret) => managed_settings(secret, vars, &get)?,
        };
        let addr_value = get(&ADDR).unwrap_or_default();
        let addr = addr_value
            .parse()
            .map_err(|_| ConfigError::new(ADDR.name, addr_value, ADDR.accepts))?;
        let shutdown_delay = parse_duration(
            SHUTDOWN_DELAY.name,
            get(&SHUTDOWN_DELAY).unwrap_or_default(),
        )?;
        let reinvocation = match get(&REINVOCATION_POLICY).unwrap_or_default() {
            "IfNeeded" => Reinvocation::IfNeeded,
            "Never" => Reinvocation::Never,
            other => {
                return Err(ConfigError::new(
                    REINVOCATION_POLICY.name,
                    other,
                    REINVOCATION_POLICY.accepts,
                ))
            }
        };
        Ok(Self {
            addr,
            reinvocation,
            tls,
            sidecar: required(&SIDECAR)?,
            shutdown_delay,
        })
    }
}

/// [`TlsSource::Managed`] from [`TLS_SECRET`] and the settings that go with it.
fn managed_settings<'a>(
    secret: &str,
    vars: &'a BTreeMap<String, String>,
    get: &dyn Fn(&Setting) -> Option<&'a str>,
) -> Result<TlsSource, ConfigError> {
    let valid_name = !secret.is_empty()
        && secret.len() <= 253
        && secret
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    if !valid_name {
        return Err(ConfigError::new(
            TLS_SECRET.name,
            secret,
            TLS_SECRET.accepts,
        ));
    }
    for files in [&TLS_CERT, &TLS_KEY] {
        if let Some(v) = get(files) {
            return Err(ConfigError::new(
                files.name,
                v,
                format!(
                    "nothing while {}={secret} is set: the certificate comes either from files or from the Secret",
                    TLS_SECRET.name
                ),
            ));
        }
    }
    let configuration = get(&CONFIGURATION).ok_or_else(|| {
        ConfigError::new(
            CONFIGURATION.name,
            "",
            format!(
                "{} (required with {})",
                CONFIGURATION.accepts, TLS_SECRET.name
            ),
        )
    })?;
    let kube = |name: &str| {
        vars.get(name)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                ConfigError::new(
                    name,
                    "",
                    format!(
                        "the API server's address, which the kubelet sets in every container (needed with {})",
                        TLS_SECRET.name
                    ),
                )
            })
    };
    let (host, port) = (
        kube("KUBERNETES_SERVICE_HOST")?,
        kube("KUBERNETES_SERVICE_PORT")?,
    );
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    let duration = |s: &Setting| parse_duration(s.name, get(s).unwrap_or_default());
    let validity = duration(&CERT_VALIDITY)?;
    let poll = duration(&SECRET_POLL_INTERVAL)?;
    let overlap_value = get(&ROTATION_OVERLAP).unwrap_or_default();
    let overlap = parse_duration(ROTATION_OVERLAP.name, overlap_value).map_err(|_| {
        ConfigError::new(
            ROTATION_OVERLAP.name,
            overlap_value,
            ROTATION_OVERLAP.accepts,
        )
    })?;
    if poll.checked_mul(2).is_none_or(|twice| overlap < twice) {
        return Err(ConfigError::new(
            ROTATION_OVERLAP.name,
            overlap_value,
            format!(
                "{} (now {})",
                ROTATION_OVERLAP.accepts,
                humantime::format_duration(poll)
            ),
        ));
    }
    let validity_value = get(&CERT_VALIDITY).unwrap_or_default();
    // X.509 writes no time after 9999-12-31T23:59:59Z (rcgen cannot make such a certificate).
    let last = SystemTime::UNIX_EPOCH + Duration::from_secs(253_402_300_799);
    if SystemTime::now()
        .checked_add(validity)
        .is_none_or(|end| end > last)
    {
        return Err(ConfigError::new(
            CERT_VALIDITY.name,
            validity_value,
            format!(
                "{} that ends before the year 10000 (the last time an X.509 certificate can hold)",
                CERT_VALIDITY.accepts
            ),
        ));
    }
    let Some(thrice) = overlap.checked_mul(3) else {
        return Err(ConfigError::new(
            ROTATION_OVERLAP.name,
            overlap_value,
            format!(
                "{}, and at most a third of {}",
                ROTATION_OVERLAP.accepts, CERT_VALIDITY.name
            ),
        ));
    };
    if validity < thrice {
        let value = validity_value;
        return Err(ConfigError::new(
            CERT_VALIDITY.name,
            value,
            format!(
                "a duration at least three times {} ({}): the certificate is renewed at two thirds of it, and the switch to the new one waits that long",
                ROTATION_OVERLAP.name,
                humantime::format_duration(overlap)
            ),
        ));
    }
    Ok(TlsSource::Managed(ManagedSettings {
        secret: secret.to_string(),
        configuration: configuration.to_string(),
        service_account_dir: PathBuf::from(get(&SERVICE_ACCOUNT_DIR).unwrap_or_default()),
        api_server: format!("https://{host}:{port}"),
        validity,
        resync: duration(&RESYNC_INTERVAL)?,
        poll,
        overlap,
    }))
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
        assert_eq!(s.reinvocation, Reinvocation::IfNeeded);
        assert_eq!(
            s.tls,
            TlsSource::Files {
                cert: PathBuf::from("/tls/tls.crt"),
                key: PathBuf::from("/tls/tls.key")
            }
        );
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
    fn a_secret_the_webhook_keeps_instead_of_files() {
        let base = [
            ("GPU_SIDECAR_WEBHOOK_SIDECAR", "/etc/webhook/sidecar.json"),
            ("GPU_SIDECAR_WEBHOOK_TLS_SECRET", "gpu-webhook-tls"),
            ("GPU_SIDECAR_WEBHOOK_CONFIGURATION", "gpu-webhook"),
            ("KUBERNETES_SERVICE_HOST", "fd00::1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
        ];
        let s = WebhookSettings::from_vars(&vars(&base)).unwrap();
        let TlsSource::Managed(m) = s.tls else {
            panic!("{s:?}")
        };
        assert_eq!(
            (
                m.secret.as_str(),
                m.configuration.as_str(),
                m.api_server.as_str()
            ),
            ("gpu-webhook-tls", "gpu-webhook", "https://[fd00::1]:443")
        );
        assert_eq!(
            m.service_account_dir,
            PathBuf::from("/var/run/secrets/kubernetes.io/serviceaccount")
        );
        assert_eq!(m.validity, Duration::from_secs(3650 * 86_400));
        assert_eq!(m.resync, Duration::from_secs(60));
        assert_eq!(m.poll, Duration::from_secs(2));
        assert_eq!(m.overlap, Duration::from_secs(30));
        // An overlap shorter than two polls, or a validity under three overlaps, is refused
        // by name.
        // Durations too long to compute with, or a validity past the last time X.509 can
        // write (9999-12-31), are refused by name too, not a panic.
        // (A poll interval that long leaves no overlap twice as long: the overlap is named.)
        const OVERLAP: &str = "GPU_SIDECAR_WEBHOOK_ROTATION_OVERLAP";
        const VALIDITY: &str = "GPU_SIDECAR_WEBHOOK_CERT_VALIDITY";
        for (var, value, named) in [
            (OVERLAP, "3s", OVERLAP),
            (VALIDITY, "89s", VALIDITY),
            (VALIDITY, "100000y", VALIDITY),
            (OVERLAP, "300000000000y", OVERLAP),
            (
                "GPU_SIDECAR_WEBHOOK_SECRET_POLL_INTERVAL",
                "300000000000y",
                OVERLAP,
            ),
        ] {
            let mut v = vars(&base);
            v.insert(var.into(), value.into());
            let e = WebhookSettings::from_vars(&v).unwrap_err();
            assert_eq!(e.var, named, "{e}");
        }
        let mut v = vars(&base);
        v.insert("GPU_SIDECAR_WEBHOOK_CERT_VALIDITY".into(), "6s".into());
        v.insert("GPU_SIDECAR_WEBHOOK_ROTATION_OVERLAP".into(), "2s".into());
        v.insert(
            "GPU_SIDECAR_WEBHOOK_SECRET_POLL_INTERVAL".into(),
            "200ms".into(),
        );
        assert!(WebhookSettings::from_vars(&v).is_ok());
        for (drop_or_add, var) in [
            (
                Some("GPU_SIDECAR_WEBHOOK_CONFIGURATION"),
                "GPU_SIDECAR_WEBHOOK_CONFIGURATION",
            ),
            (Some("KUBERNETES_SERVICE_HOST"), "KUBERNETES_SERVICE_HOST"),
            (None, "GPU_SIDECAR_WEBHOOK_TLS_CERT"),
        ] {
            let mut v = vars(&base);
            match drop_or_add {
                Some(k) => {
                    v.remove(k);
                }
                None => {
                    v.insert(var.into(), "/tls/tls.crt".into());
                }
            }
            assert_eq!(WebhookSettings::from_vars(&v).unwrap_err().var, var);
        }
        let mut v = vars(&base);
        v.insert(TLS_SECRET.name.into(), "Not_A_Name".into());
        assert_eq!(
            WebhookSettings::from_vars(&v).unwrap_err().var,
            TLS_SECRET.name
        );
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
        v.insert(REINVOCATION_POLICY.name.into(), "Never".into());
        let s = WebhookSettings::from_vars(&v).unwrap();
        assert_eq!(s.reinvocation, Reinvocation::Never);
        assert_eq!(s.addr, "127.0.0.1:0".parse().unwrap());
        let mut v = vars(&FILES);
        v.insert(REINVOCATION_POLICY.name.into(), "ifneeded".into());
        assert_eq!(
            WebhookSettings::from_vars(&v).unwrap_err().to_string(),
            "invalid GPU_SIDECAR_WEBHOOK_REINVOCATION_POLICY=\"ifneeded\": expected IfNeeded or Never (the webhook entries' reinvocationPolicy)"
        );
        assert_eq!(s.shutdown_delay, Duration::from_millis(100));
    }
}
