//! The serving certificate, re-read when its files change: a rustls
//! [`ResolvesServerCert`] that reads the two files at each TLS handshake (a few KiB; the API
//! server keeps its connections open, so handshakes are rare) and parses them again when
//! their contents differ from the last read. Contents, not modification times: two updates
//! within one tick of the file system's clock, with the same sizes and a reused inode, look
//! the same to `stat`. A renewed certificate (Helm upgrade, cert-manager renewal, a Secret
//! volume's symlink swap) is so served from the next handshake on, without a restart. A pair
//! that cannot be used (half written, key not matching) is logged once and the previous
//! certificate is served until the files change again.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::settings::{Setting, TLS_CERT, TLS_KEY};

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
        Ok(Self {
            cert,
            key,
            provider,
            state: Mutex::new(State { current, seen }),
        })
    }

    /// The certificate to serve now: reloaded first if a file changed since it was read.
    pub fn current(&self) -> Arc<CertifiedKey> {
        let now = contents(&self.cert, &self.key);
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if now != state.seen {
            state.seen = now;
            match load(&self.cert, &self.key, &self.provider) {
                Ok(key) => {
                    state.current = Arc::new(key);
                    tracing::info!(
                        cert = %self.cert.display(),
                        "the serving certificate changed on disk: serving the new one from this handshake on"
                    );
                }
                Err(e) => tracing::warn!(
                    "the serving certificate changed on disk but cannot be used: {e}; serving the previous one until the files change again"
                ),
            }
        }
        state.current.clone()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}
