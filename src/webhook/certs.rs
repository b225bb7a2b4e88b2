//! The serving certificate, re-read when its files change: a rustls
//! [`ResolvesServerCert`] that reads the two files at each TLS handshake (a few KiB; the API
//! server keeps its connections open, so handshakes are rare) and parses them again when
//! their contents differ from the last read. Contents, not modification times: two updates
//! within one tick of the file system's clock, with the same sizes and a reused inode, look
//! the same to `stat`. A renewed certificate (Helm upgrade, cert-manager renewal, a Secret
//! volume's symlink swap) is so served from the next handshake on, without a restart. A pair
//! that cannot be used (half written, key not matching) is logged once and the previous
//! certificate is served until the files change again.
//!
//! [`Validity`] reads when a certificate chain may be served (its `notBefore` and `notAfter`,
//! x509-cert): what the webhook exports as `gpu_sidecar.webhook.certificate.expiry`, and, for
//! a certificate it keeps itself ([`super::managed`]), when it renews it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::settings::{Setting, TLS_CERT, TLS_KEY};

/// When a certificate chain may be served: the latest `notBefore` and the earliest `notAfter`
/// of its certificates (a chain is no longer valid once any of them has expired).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    /// `notBefore`.
    pub not_before: SystemTime,
    /// `notAfter`: from this time on the certificate is expired.
    pub not_after: SystemTime,
}

impl Validity {
    /// The validity of the certificates in `chain` (DER), as above.
    ///
    /// # Errors
    /// x509-cert's reason, for a chain that is empty or holds something that is not an X.509
    /// certificate.
    pub fn of_chain<'a>(chain: impl IntoIterator<Item = &'a [u8]>) -> Result<Self, String> {
        use x509_cert::der::Decode as _;
        let mut out: Option<Validity> = None;
        for der in chain {
            let cert = x509_cert::Certificate::from_der(der)
                .map_err(|e| format!("not an X.509 certificate ({e})"))?;
            let v = cert.tbs_certificate().validity();
            let at = |t: x509_cert::time::Time| SystemTime::UNIX_EPOCH + t.to_unix_duration();
            let this = Validity {
                not_before: at(v.not_before),
                not_after: at(v.not_after),
            };
            out = Some(match out {
                None => this,
                Some(o) => Validity {
                    not_before: o.not_before.max(this.not_before),
                    not_after: o.not_after.min(this.not_after),
                },
            });
        }
        out.ok_or_else(|| "no certificate".to_string())
    }

    /// The validity of the PEM certificates in `pem`.
    ///
    /// # Errors
    /// As [`Validity::of_chain`], or the PEM's.
    pub fn of_pem(pem: &str) -> Result<Self, String> {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("not PEM certificates ({e})"))?;
        Self::of_chain(chain.iter().map(|c| c.as_ref()))
    }

    /// Whether it is expired at `now` (`notAfter` reached).
    pub fn expired(&self, now: SystemTime) -> bool {
        now >= self.not_after
    }

    /// Two thirds of the way from `notBefore` to `notAfter`: when a certificate the webhook
    /// keeps itself is renewed (as cert-manager's default `renewBefore` does).
    pub fn renewal(&self) -> SystemTime {
        let span = self
            .not_after
            .duration_since(self.not_before)
            .unwrap_or(Duration::ZERO);
        self.not_before + span * 2 / 3
    }

    /// `notAfter` as RFC 3339 (seconds, UTC), for logs.
    pub fn expires(&self) -> String {
        humantime::format_rfc3339_seconds(self.not_after).to_string()
    }
}

/// The two files' contents (`None`: unreadable).
type Contents = (Option<Vec<u8>>, Option<Vec<u8>>);

fn contents(cert: &Path, key: &Path) -> Contents {
    (std::fs::read(cert).ok(), std::fs::read(key).ok())
}

/// A certificate file pair that cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}={path}: {reason}")]
pub struct CertError {
    /// The variable that names the file.
    pub var: &'static str,
    /// The file.
    pub path: String,
    /// What is wrong.
    pub reason: String,
}

fn error(setting: &Setting, path: &Path, reason: impl Into<String>) -> CertError {
    CertError {
        var: setting.name,
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

/// Reads and checks a certificate chain and its key.
///
/// # Errors
/// [`CertError`] naming the variable of the file at fault.
pub fn load(cert: &Path, key: &Path, provider: &CryptoProvider) -> Result<CertifiedKey, CertError> {
    let bytes =
        std::fs::read(cert).map_err(|e| error(&TLS_CERT, cert, format!("cannot read it ({e})")))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| error(&TLS_CERT, cert, format!("not PEM certificates ({e})")))?;
    if chain.is_empty() {
        return Err(error(&TLS_CERT, cert, "no certificate in it"));
    }
    let key_bytes =
        std::fs::read(key).map_err(|e| error(&TLS_KEY, key, format!("cannot read it ({e})")))?;
    let der = PrivateKeyDer::from_pem_slice(&key_bytes).map_err(|_| {
        error(
            &TLS_KEY,
            key,
            "no PEM private key (PKCS#8, PKCS#1 or SEC1) in it",
        )
    })?;
    CertifiedKey::from_der(chain, der, provider).map_err(|e| {
        error(
            &TLS_KEY,
            key,
            format!(
                "cannot be used with the certificate in {} ({e})",
                cert.display()
            ),
        )
    })
}

struct State {
    /// What is served.
    current: Arc<CertifiedKey>,
    /// Its validity (`None`: not readable, which rustls does not require).
    validity: Option<Validity>,
    /// The files' contents when `current` was loaded, or when a load last failed (so that a
    /// broken pair is tried again only once the files change).
    seen: Contents,
}

/// The serving certificate, reloaded when its files change.
pub struct ReloadingCert {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    state: Mutex<State>,
}

impl fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl ReloadingCert {
    /// Loads the pair once.
    ///
    /// # Errors
    /// [`CertError`] if the files cannot be served (the webhook then does not start).
    pub fn new(
        cert: PathBuf,
        key: PathBuf,
        provider: Arc<CryptoProvider>,
    ) -> Result<Self, CertError> {
        let seen = contents(&cert, &key);
        let current = Arc::new(load(&cert, &key, &provider)?);
        let validity = validity_of(&current, &cert);
        Ok(Self {
            cert,
            key,
            provider,
            state: Mutex::new(State {
                current,
                validity,
                seen,
            }),
        })
    }

    /// The certificate to serve now: reloaded first if a file changed since it was read.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.served().0
    }

    /// The certificate to serve now (as [`ReloadingCert::current`]) and its validity.
    pub fn served(&self) -> (Arc<CertifiedKey>, Option<Validity>) {
        let now = contents(&self.cert, &self.key);
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if now != state.seen {
            state.seen = now;
            match load(&self.cert, &self.key, &self.provider) {
                Ok(key) => {
                    state.current = Arc::new(key);
                    state.validity = validity_of(&state.current, &self.cert);
                    tracing::info!(
                        cert = %self.cert.display(),
                        expires = state.validity.map(|v| v.expires()).unwrap_or_default(),
                        "the serving certificate changed on disk: serving the new one from this handshake on"
                    );
                }
                Err(e) => tracing::warn!(
                    "the serving certificate changed on disk but cannot be used: {e}; serving the previous one until the files change again"
                ),
            }
        }
        (state.current.clone(), state.validity)
    }
}

/// The validity of `key`'s chain, read from `path`; a warning if it cannot be read or the
/// certificate is already expired (served all the same: it is what the files hold, and a
/// renewal writes new files).
fn validity_of(key: &CertifiedKey, path: &Path) -> Option<Validity> {
    match Validity::of_chain(key.cert.iter().map(|c| c.as_ref())) {
        Ok(v) => {
            if v.expired(SystemTime::now()) {
                tracing::error!(
                    cert = %path.display(),
                    expires = %v.expires(),
                    "the serving certificate {} expired at {}: the API server refuses it, so pods are created without the sidecar (failurePolicy Ignore) or not at all (Fail); renew it (cert-manager, helm upgrade, the Secret you provide)",
                    path.display(),
                    v.expires()
                );
            }
            Some(v)
        }
        Err(e) => {
            tracing::warn!(
                cert = %path.display(),
                "cannot read the validity of the serving certificate {}: {e}; its expiry is not exported",
                path.display()
            );
            None
        }
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}
