//! A serving certificate the webhook keeps itself (`GPU_SIDECAR_WEBHOOK_TLS_SECRET`), so that
//! the chart's rendered manifests carry no key material and every `helm template` (Argo CD,
//! Flux, `helm template | kubectl apply`) renders the same objects: nothing a sync applies can
//! make the API server trust a CA the webhook does not serve.
//!
//! **The Secret** (the webhook's namespace, type `kubernetes.io/tls` when the webhook makes it)
//! holds the pair every replica serves and the CAs the configuration's `caBundle` must carry:
//! - `tls.crt`, `tls.key`: the newest serving certificate (rcgen, ECDSA P-256, for the Service
//!   the configuration names: `<service>`, `<service>.<namespace>`, `<service>.<namespace>.svc`);
//! - `ca.crt`: the CA that signed it (the CA's key is not kept);
//! - `previous-ca.crt`, during a rotation only: the CAs trusted before ([`PREVIOUS_CA_KEY`]);
//! - the annotations [`SERVE_FROM_ANNOTATION`] (a replica serving an earlier certificate goes
//!   on serving it until then) and [`PREVIOUS_CA_UNTIL_ANNOTATION`] (when `previous-ca.crt` is
//!   dropped), RFC 3339 times, during a rotation only.
//!
//! The configuration's `caBundle` is `ca.crt` followed by `previous-ca.crt`. A write changes
//! only these keys and annotations: the Secret's type and whatever others put on it (labels,
//! annotations, owner references, other keys) stay as they are.
//!
//! **Each replica**, every `GPU_SIDECAR_WEBHOOK_SECRET_POLL_INTERVAL` (2 s), `GET`s the Secret
//! and takes the one step its state calls for ([`plan`]), whichever replica comes first (a
//! write carries the `resourceVersion` it read: a replica that lost the race, `409 Conflict`,
//! reads again and finds the step done):
//! 1. Absent (first install, or deleted to renew): a new CA and certificate are made and the
//!    Secret created (`POST`; one found holding none of the three keys, made beforehand, is
//!    filled instead, `PUT`). The CAs the configuration's `caBundle` holds now (a replica may
//!    serve a certificate of theirs) go into `previous-ca.crt`, with the two times below.
//! 2. Its certificate (or CA) is expired: replaced at once, without overlap (an expired pair
//!    is never served: no client accepts it).
//! 3. Two thirds of its validity have passed: renewed, with overlap ([`Step::Renew`]): the new
//!    pair, `previous-ca.crt` = the CAs trusted until now, served from now + the overlap
//!    (`GPU_SIDECAR_WEBHOOK_ROTATION_OVERLAP`, 30 s), the previous CAs kept until twice that.
//! 4. `previous-ca.crt` past its time: dropped.
//!
//! Then the replica sets the `caBundle` of every entry of the `MutatingWebhookConfiguration`
//! to the Secret's CAs (a JSON patch that `test`s the configuration's `resourceVersion`
//! first), at once when the Secret changed, and every `GPU_SIDECAR_WEBHOOK_RESYNC_INTERVAL`
//! (1 m) in case a sync replaced the configuration. It serves the Secret's certificate
//! ([`ServingCert`]): at once if it served none, an expired one, or one whose CA the Secret no
//! longer lists; otherwise from the Secret's serve-from time on, and only once it has seen
//! the configuration carry the new CA. So during a rotation every replica serves a certificate
//! whose CA the `caBundle` carries: the new CA is there an overlap before any replica serves
//! the new certificate (every replica has polled the Secret by then, and every API server
//! has taken the `caBundle`), and the old one an overlap after every replica switched.
//!
//! The API server is reached as in-cluster clients do: `KUBERNETES_SERVICE_HOST` and `_PORT`,
//! the service account's `ca.crt` as the only trust, its `token` (re-read for each request,
//! as the kubelet rotates it). The chart's Role and ClusterRole allow exactly these calls
//! (`get`, `create`, `update` of the Secret; `get`, `patch` of the configuration).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use serde_json::{json, Value};

use super::certs::Validity;
use super::metrics::CertificateGauges;
use super::settings::ManagedSettings;

/// Data key of the Secret holding the CAs trusted before `ca.crt`, during a rotation (PEM).
pub const PREVIOUS_CA_KEY: &str = "previous-ca.crt";
/// Secret annotation (RFC 3339): a replica that serves an earlier certificate serves the
/// Secret's from this time on.
pub const SERVE_FROM_ANNOTATION: &str = "gpu-otel-sidecar.io/serve-from";
/// Secret annotation (RFC 3339): `previous-ca.crt` is dropped (from the Secret and the
/// `caBundle`) from this time on.
pub const PREVIOUS_CA_UNTIL_ANNOTATION: &str = "gpu-otel-sidecar.io/previous-ca-until";

/// Longest wait between two reads of the Secret after a failure.
const MAX_RETRY: Duration = Duration::from_secs(60);

/// A certificate ready to serve, with what it was made from.
#[derive(Debug, Clone)]
struct Held {
    key: Arc<CertifiedKey>,
    pair: Pair,
    validity: Validity,
}

/// A certificate the Secret holds that is not served yet.
#[derive(Debug)]
struct Pending {
    held: Held,
    /// The Secret's serve-from time.
    from: SystemTime,
    /// Whether the configuration's `caBundle` was seen carrying its CA.
    trusted: bool,
}

#[derive(Debug, Default)]
struct Serving {
    current: Option<Held>,
    pending: Option<Pending>,
}

impl Serving {
    /// Serves the pending certificate if its time has come (its serve-from time passed and its
    /// CA trusted), or if the current one has expired; says so in the log.
    fn promote_if_due(&mut self, now: SystemTime) -> bool {
        let Some(p) = &self.pending else {
            return false;
        };
        let current_expired = self
            .current
            .as_ref()
            .is_none_or(|c| c.validity.expired(now));
        if !(current_expired || (p.trusted && now >= p.from)) {
            return false;
        }
        let Some(p) = self.pending.take() else {
            return false;
        };
        tracing::info!(
            expires = %p.held.validity.expires(),
            "serving the renewed certificate from this handshake on (it expires at {})",
            p.held.validity.expires()
        );
        self.current = Some(p.held);
        true
    }
}

/// The certificate served now, and the next one with its time: what the TLS server resolves
/// at each handshake. `None` until the first one.
#[derive(Debug, Default)]
pub struct ServingCert {
    state: Mutex<Serving>,
}

impl ServingCert {
    fn lock(&self) -> std::sync::MutexGuard<'_, Serving> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a certificate is served yet.
    pub fn ready(&self) -> bool {
        self.lock().current.is_some()
    }

    /// The validity of the certificate served at `now` (the next one taking over first, if
    /// due).
    pub fn served(&self, now: SystemTime) -> Option<Validity> {
        let mut s = self.lock();
        s.promote_if_due(now);
        s.current.as_ref().map(|c| c.validity)
    }

    /// The CA of the certificate served now.
    fn current_ca(&self) -> Option<String> {
        self.lock().current.as_ref().map(|c| c.pair.ca.clone())
    }

    /// Whether `pair` is served or waiting to be.
    fn holds(&self, pair: &Pair) -> bool {
        let s = self.lock();
        s.current.as_ref().is_some_and(|c| &c.pair == pair)
            || s.pending.as_ref().is_some_and(|p| &p.held.pair == pair)
    }

    /// The Secret's certificate: served at once when nothing (or an expired certificate) is
    /// served or `replace_now`; else from `from` on, once `trusted`.
    fn offer(
        &self,
        held: Held,
        from: Option<SystemTime>,
        trusted: bool,
        replace_now: bool,
        now: SystemTime,
    ) {
        let mut s = self.lock();
        if s.current.as_ref().is_some_and(|c| c.pair == held.pair) {
            s.pending = None;
            return;
        }
        if s.current.is_none() || replace_now {
            s.pending = None;
            s.current = Some(held);
            return;
        }
        let from = from.unwrap_or(now);
        match &mut s.pending {
            Some(p) if p.held.pair == held.pair => {
                p.from = from;
                p.trusted = trusted;
            }
            _ => {
                tracing::info!(
                    serve_from = %humantime::format_rfc3339_seconds(from),
                    "the Secret holds a renewed certificate: serving it from {} on, once the configuration's caBundle carries its CA (both CAs are there meanwhile)",
                    humantime::format_rfc3339_seconds(from)
                );
                s.pending = Some(Pending {
                    held,
                    from,
                    trusted,
                });
            }
        }
        s.promote_if_due(now);
    }

    /// As [`ServingCert::offer`], for a pair it holds already: its time and trust updated.
    fn refresh(
        &self,
        pair: &Pair,
        from: Option<SystemTime>,
        trusted: bool,
        replace_now: bool,
        now: SystemTime,
    ) {
        let mut s = self.lock();
        if s.current.as_ref().is_some_and(|c| &c.pair == pair) {
            s.pending = None;
            return;
        }
        if let Some(p) = &mut s.pending {
            p.from = from.unwrap_or(now);
            p.trusted = trusted;
            if replace_now {
                p.from = now;
                p.trusted = true;
            }
        }
        s.promote_if_due(now);
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut s = self.lock();
        s.promote_if_due(SystemTime::now());
        s.current.as_ref().map(|c| c.key.clone())
    }
}

/// A CA and the serving certificate it signed, PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pair {
    /// `ca.crt`: the CA.
    pub ca: String,
    /// `tls.crt`.
    pub cert: String,
    /// `tls.key`.
    pub key: String,
}

impl Pair {
    /// Makes a CA and a serving certificate for `names`, valid for `validity` from a little
    /// before now (a tenth of it, at most an hour: API servers whose clocks are behind accept
    /// it too).
    ///
    /// # Errors
    /// rcgen's message (it does not fail for these inputs).
    pub fn generate(names: &[String], validity: Duration) -> Result<Self, String> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
            KeyUsagePurpose,
        };
        let e = |e: rcgen::Error| format!("cannot make the certificate: {e}");
        let now = SystemTime::now();
        let before = (validity / 10).min(Duration::from_secs(3600));
        let period = |p: &mut CertificateParams| {
            p.not_before = (now - before).into();
            p.not_after = (now + validity).into();
        };
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(e)?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        let first = names
            .first()
            .map_or("gpu-otel-sidecar-webhook", String::as_str);
        // The issue time in the CA's name: two CAs in one caBundle are told apart.
        ca_params.distinguished_name.push(
            DnType::CommonName,
            format!("{first} CA {}", humantime::format_rfc3339_seconds(now)),
        );
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        period(&mut ca_params);
        let ca_key = KeyPair::generate().map_err(e)?;
        let ca = ca_params.self_signed(&ca_key).map_err(e)?;
        let mut params = CertificateParams::new(names.to_vec()).map_err(e)?;
        params.distinguished_name.push(DnType::CommonName, first);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        period(&mut params);
        let key = KeyPair::generate().map_err(e)?;
        let cert = params.signed_by(&key, &ca, &ca_key).map_err(e)?;
        Ok(Self {
            ca: ca.pem(),
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }

    /// What rustls serves.
    ///
    /// # Errors
    /// Why the pair cannot be served, in words.
    pub fn certified_key(&self, provider: &CryptoProvider) -> Result<CertifiedKey, String> {
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(self.cert.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| format!("tls.crt is not PEM certificates ({e})"))?;
        if chain.is_empty() {
            return Err("tls.crt holds no certificate".into());
        }
        let key = PrivateKeyDer::from_pem_slice(self.key.as_bytes())
            .map_err(|_| "tls.key holds no PEM private key".to_string())?;
        CertifiedKey::from_der(chain, key, provider)
            .map_err(|e| format!("tls.key does not go with tls.crt ({e})"))
    }

    /// When the pair may be served: its certificate's and its CA's validity together.
    ///
    /// # Errors
    /// Why it cannot be read, in words.
    pub fn validity(&self) -> Result<Validity, String> {
        Validity::of_pem(&format!("{}\n{}", self.cert, self.ca))
            .map_err(|e| format!("tls.crt and ca.crt: {e}"))
    }
}

/// The Secret as read: the pair, the CAs trusted before, the rotation's times and the
/// `resourceVersion` a write must carry. Two are equal when all of that is (whatever else
/// the objects hold).
#[derive(Debug, Clone)]
pub struct Stored {
    /// `ca.crt`, `tls.crt`, `tls.key`.
    pub pair: Pair,
    /// [`PREVIOUS_CA_KEY`] (empty: none).
    pub previous_ca: String,
    /// [`SERVE_FROM_ANNOTATION`].
    pub serve_from: Option<SystemTime>,
    /// [`PREVIOUS_CA_UNTIL_ANNOTATION`].
    pub previous_until: Option<SystemTime>,
    /// `metadata.resourceVersion` (`None` for a Secret not written yet).
    pub resource_version: Option<String>,
    /// The Secret as read (`None` for one not written yet): a write changes only the keys and
    /// annotations above, and keeps the rest (its `type`, which the API server does not let
    /// change; the labels, annotations, owner references, finalizers and data keys that others
    /// put on it).
    pub object: Option<Value>,
}

impl PartialEq for Stored {
    fn eq(&self, other: &Self) -> bool {
        (
            &self.pair,
            &self.previous_ca,
            self.serve_from,
            self.previous_until,
            &self.resource_version,
        ) == (
            &other.pair,
            &other.previous_ca,
            other.serve_from,
            other.previous_until,
            &other.resource_version,
        )
    }
}

impl Eq for Stored {}

impl Stored {
    /// A Secret holding `pair` alone.
    pub fn new(pair: Pair) -> Self {
        Self {
            pair,
            previous_ca: String::new(),
            serve_from: None,
            previous_until: None,
            resource_version: None,
            object: None,
        }
    }

    /// What the configuration's `caBundle` carries (PEM): `ca.crt`, then `previous-ca.crt`.
    pub fn bundle(&self) -> String {
        join_pem(
            [self.pair.ca.as_str()]
                .into_iter()
                .chain(pem_blocks(&self.previous_ca)),
        )
    }

    /// Reads a Secret.
    ///
    /// # Errors
    /// What is missing or unreadable, in words.
    pub fn from_secret(secret: &Value) -> Result<Self, String> {
        let text = |name: &str| -> Result<Option<String>, String> {
            let Some(b64) = secret["data"][name].as_str() else {
                return Ok(None);
            };
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| format!("data[{name:?}] is not base64 ({e})"))?;
            String::from_utf8(bytes)
                .map(Some)
                .map_err(|_| format!("data[{name:?}] is not PEM text"))
        };
        let field = |name: &str| text(name)?.ok_or_else(|| format!("it has no data[{name:?}]"));
        let time = |key: &str| {
            secret["metadata"]["annotations"][key]
                .as_str()
                .and_then(|t| humantime::parse_rfc3339(t).ok())
        };
        Ok(Self {
            pair: Pair {
                ca: field("ca.crt")?,
                cert: field("tls.crt")?,
                key: field("tls.key")?,
            },
            previous_ca: text(PREVIOUS_CA_KEY)?.unwrap_or_default(),
            serve_from: time(SERVE_FROM_ANNOTATION),
            previous_until: time(PREVIOUS_CA_UNTIL_ANNOTATION),
            resource_version: secret["metadata"]["resourceVersion"]
                .as_str()
                .map(str::to_string),
            object: Some(secret.clone()),
        })
    }

    /// The Secret `name` of `namespace` holding this (with its `resourceVersion`, if any: a
    /// `PUT` then fails with `409 Conflict` if another writer came first). A Secret read
    /// before keeps everything but our keys and annotations ([`Stored::object`]); a new one is
    /// of type `kubernetes.io/tls`.
    pub fn to_secret(&self, namespace: &str, name: &str) -> Value {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let mut secret = self.object.clone().unwrap_or_else(
            || json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls"}),
        );
        let object = |v: &mut Value, key: &str| {
            if !v[key].is_object() {
                v[key] = json!({});
            }
        };
        object(&mut secret, "data");
        object(&mut secret, "metadata");
        let data = &mut secret["data"];
        data["ca.crt"] = json!(b64(&self.pair.ca));
        data["tls.crt"] = json!(b64(&self.pair.cert));
        data["tls.key"] = json!(b64(&self.pair.key));
        if self.previous_ca.is_empty() {
            data.as_object_mut().map(|d| d.remove(PREVIOUS_CA_KEY));
        } else {
            data[PREVIOUS_CA_KEY] = json!(b64(&self.previous_ca));
        }
        let metadata = &mut secret["metadata"];
        // What the API server keeps by itself when a write leaves it out.
        if let Some(m) = metadata.as_object_mut() {
            m.remove("managedFields");
            m.remove("resourceVersion");
        }
        metadata["name"] = json!(name);
        metadata["namespace"] = json!(namespace);
        object(metadata, "labels");
        metadata["labels"]["app.kubernetes.io/managed-by"] = json!("gpu-otel-sidecar-webhook");
        object(metadata, "annotations");
        let rfc3339 = |t: SystemTime| humantime::format_rfc3339_millis(t).to_string();
        let annotations = metadata["annotations"]
            .as_object_mut()
            .expect("made an object above");
        for (key, time) in [
            (SERVE_FROM_ANNOTATION, self.serve_from),
            (PREVIOUS_CA_UNTIL_ANNOTATION, self.previous_until),
        ] {
            match time {
                Some(t) => annotations.insert(key.into(), json!(rfc3339(t))),
                None => annotations.remove(key),
            };
        }
        if annotations.is_empty() {
            metadata.as_object_mut().map(|m| m.remove("annotations"));
        }
        if let Some(rv) = &self.resource_version {
            metadata["resourceVersion"] = json!(rv);
        }
        secret
    }
}

/// The PEM blocks of `pem` (each with its header and footer, no trailing newline).
fn pem_blocks(pem: &str) -> impl Iterator<Item = &str> {
    const END: &str = "-----END CERTIFICATE-----";
    let mut rest = pem;
    std::iter::from_fn(move || {
        let start = rest.find("-----BEGIN CERTIFICATE-----")?;
        let end = start + rest[start..].find(END)? + END.len();
        let block = &rest[start..end];
        rest = &rest[end..];
        Some(block)
    })
}

/// PEM blocks joined, each once, one per line.
fn join_pem<'a>(blocks: impl IntoIterator<Item = &'a str>) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for b in blocks {
        let b = b.trim();
        if !b.is_empty() && !seen.contains(&b) {
            seen.push(b);
        }
    }
    seen.iter().map(|b| format!("{b}\n")).collect()
}

/// The CAs of `bundle` that are not expired at `now` and are not `except`, joined.
fn unexpired_cas(bundle: &str, except: &str, now: SystemTime) -> String {
    let except: Vec<&str> = pem_blocks(except).collect();
    join_pem(
        pem_blocks(bundle)
            .filter(|b| !except.contains(b) && Validity::of_pem(b).is_ok_and(|v| !v.expired(now))),
    )
}

/// The step a Secret's state calls for at `now` (`validity`: its pair's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do.
    Keep,
    /// A new pair: the certificate (or its CA) `expired` (replaced at once), or two thirds of
    /// its validity passed (with overlap).
    Renew {
        /// Whether the pair has expired.
        expired: bool,
    },
    /// `previous-ca.crt` past its time: dropped.
    DropPrevious,
}

/// The step for `stored` at `now`.
pub fn plan(stored: &Stored, validity: Validity, now: SystemTime) -> Step {
    if validity.expired(now) {
        Step::Renew { expired: true }
    } else if now >= validity.renewal() {
        Step::Renew { expired: false }
    } else if !stored.previous_ca.is_empty() && stored.previous_until.is_none_or(|t| now >= t) {
        Step::DropPrevious
    } else {
        Step::Keep
    }
}

/// The Secret after `step` at `now`, with a new pair `fresh` for a renewal; `overlap`:
/// `GPU_SIDECAR_WEBHOOK_ROTATION_OVERLAP`.
pub fn apply(
    stored: &Stored,
    step: Step,
    fresh: Option<Pair>,
    overlap: Duration,
    now: SystemTime,
) -> Stored {
    match (step, fresh) {
        (Step::Renew { expired }, Some(pair)) => {
            let previous = if expired {
                String::new()
            } else {
                unexpired_cas(&stored.bundle(), &pair.ca, now)
            };
            rotation(
                pair,
                previous,
                overlap,
                now,
                stored.resource_version.clone(),
                stored.object.clone(),
            )
        }
        (Step::DropPrevious, _) => Stored {
            previous_ca: String::new(),
            serve_from: None,
            previous_until: None,
            ..stored.clone()
        },
        _ => stored.clone(),
    }
}

/// A Secret holding `pair`, with `previous` CAs trusted around the switch: served from
/// `now + overlap`, the previous CAs dropped at `now + 2 × overlap`. Without previous CAs, no
/// times: served at once. `resource_version` and `object`: of the Secret it is written over
/// (`None`: a new one).
fn rotation(
    pair: Pair,
    previous: String,
    overlap: Duration,
    now: SystemTime,
    resource_version: Option<String>,
    object: Option<Value>,
) -> Stored {
    let rotating = !previous.is_empty();
    Stored {
        pair,
        serve_from: rotating.then(|| now + overlap),
        previous_until: rotating.then(|| now + overlap * 2),
        previous_ca: previous,
        resource_version,
        object,
    }
}

/// The API server, as an in-cluster client reaches it.
struct Kube {
    base: String,
    token: PathBuf,
    client: reqwest::Client,
}

impl Kube {
    fn new(base: &str, dir: &Path) -> Result<Self, String> {
        let ca_path = dir.join("ca.crt");
        let ca = std::fs::read(&ca_path)
            .map_err(|e| format!("cannot read the API server's CA {}: {e}", ca_path.display()))?;
        let certs = reqwest::Certificate::from_pem_bundle(&ca)
            .map_err(|e| format!("{}: not PEM certificates ({e})", ca_path.display()))?;
        crate::telemetry::otlp::tls::install_crypto_provider();
        let client = reqwest::Client::builder()
            .tls_certs_only(certs)
            .https_only(true)
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("HTTP client: {e}"))?;
        Ok(Self {
            base: base.to_string(),
            token: dir.join("token"),
            client,
        })
    }

    /// One call: (status, JSON body or `null`).
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<(&str, Value)>,
    ) -> Result<(u16, Value), String> {
        let token = std::fs::read_to_string(&self.token).map_err(|e| {
            format!(
                "cannot read the service account token {}: {e}",
                self.token.display()
            )
        })?;
        let url = format!("{}{path}", self.base);
        let mut request = self
            .client
            .request(method.clone(), &url)
            .bearer_auth(token.trim())
            .header("Accept", "application/json");
        if let Some((content_type, body)) = body {
            request = request
                .header("Content-Type", content_type)
                .body(body.to_string());
        }
        let response = request
            .send()
            .await
            .map_err(|e| format!("{method} {url}: {}", crate::logging::with_sources(&e)))?;
        let status = response.status().as_u16();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| format!("{method} {url}: {e}"))?;
        let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok((status, value))
    }
}

fn refused(what: &str, status: u16, body: &Value) -> String {
    let message = body["message"].as_str().unwrap_or("");
    format!("{what}: HTTP {status} {message}")
}

/// Whether `secret` holds none of `ca.crt`, `tls.crt`, `tls.key` (absent or empty: a
/// `kubernetes.io/tls` placeholder must have the last two, and may leave them empty).
fn holds_no_pair(secret: &Value) -> bool {
    ["ca.crt", "tls.crt", "tls.key"]
        .iter()
        .all(|k| secret["data"][k].as_str().is_none_or(str::is_empty))
}

/// The Secret as a read found it.
enum Found {
    /// Holding a pair.
    Pair(Stored),
    /// It does not exist.
    Absent,
    /// It exists but holds none of `ca.crt`, `tls.crt`, `tls.key` ([`holds_no_pair`]: made
    /// beforehand, empty): filled as if it did not exist, keeping the rest of it.
    Empty(Value),
}

/// What a sync did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Synced {
    /// The Secret is read and served, the `caBundle` set: next poll as usual.
    Done,
    /// Another replica wrote first (`409 Conflict`): read again at once.
    Again,
}

/// The certificate's keeper: the settings, the API client and what is served.
pub struct Keeper {
    settings: ManagedSettings,
    namespace: String,
    kube: Kube,
    provider: Arc<CryptoProvider>,
    serving: Arc<ServingCert>,
    /// The Secret as last read.
    stored: Option<Stored>,
    /// The `caBundle` (base64) every entry of the configuration was last seen with.
    confirmed: Option<String>,
    /// When the configuration was last read.
    checked: Option<Instant>,
    /// Whether the wait for a `caBundle` that does not carry the new CA was logged.
    untrusted_logged: bool,
}

impl Keeper {
    /// A keeper for `settings`: reads the service account's namespace and CA.
    ///
    /// # Errors
    /// A line naming the file that cannot be read.
    pub fn new(settings: ManagedSettings, provider: Arc<CryptoProvider>) -> Result<Self, String> {
        let ns_path = settings.service_account_dir.join("namespace");
        let namespace = std::fs::read_to_string(&ns_path)
            .map_err(|e| format!("cannot read the pod's namespace {}: {e}", ns_path.display()))?
            .trim()
            .to_string();
        let kube = Kube::new(&settings.api_server, &settings.service_account_dir)?;
        Ok(Self {
            settings,
            namespace,
            kube,
            provider,
            serving: Arc::new(ServingCert::default()),
            stored: None,
            confirmed: None,
            checked: None,
            untrusted_logged: false,
        })
    }

    /// What the TLS server resolves its certificate from.
    pub fn serving(&self) -> Arc<ServingCert> {
        self.serving.clone()
    }

    /// `namespace/name` of the Secret, for logs.
    pub fn secret_ref(&self) -> String {
        format!("{}/{}", self.namespace, self.settings.secret)
    }

    fn secret_path(&self) -> String {
        format!(
            "/api/v1/namespaces/{}/secrets/{}",
            self.namespace, self.settings.secret
        )
    }

    fn configuration_path(&self) -> String {
        format!(
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{}",
            self.settings.configuration
        )
    }

    fn configuration_name(&self) -> String {
        format!(
            "MutatingWebhookConfiguration {}",
            self.settings.configuration
        )
    }

    /// The configuration as the API server has it now.
    async fn configuration(&self) -> Result<Value, String> {
        let (status, body) = self
            .kube
            .call(reqwest::Method::GET, &self.configuration_path(), None)
            .await?;
        if status != 200 {
            let what = format!("reading {}", self.configuration_name());
            return Err(refused(&what, status, &body));
        }
        Ok(body)
    }

    /// The DNS names of the Service the configuration's entries call, and the CAs their
    /// `caBundle`s carry now (PEM).
    async fn service_and_bundle(&self) -> Result<(Vec<String>, String), String> {
        let what = self.configuration_name();
        let body = self.configuration().await?;
        let entries = body["webhooks"].as_array().cloned().unwrap_or_default();
        let service = entries
            .iter()
            .find_map(|w| w["clientConfig"]["service"].as_object())
            .ok_or_else(|| format!("{what} has no entry calling a Service"))?;
        let name = service["name"].as_str().unwrap_or_default();
        let namespace = service["namespace"].as_str().unwrap_or(&self.namespace);
        let names = vec![
            name.to_string(),
            format!("{name}.{namespace}"),
            format!("{name}.{namespace}.svc"),
        ];
        let bundles: Vec<String> = entries
            .iter()
            .filter_map(|w| w["clientConfig"]["caBundle"].as_str())
            .filter_map(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .filter_map(|b| String::from_utf8(b).ok())
            .collect();
        Ok((names, join_pem(bundles.iter().flat_map(|b| pem_blocks(b)))))
    }

    /// The Secret ([`Found`]).
    async fn read(&self) -> Result<Found, String> {
        let what = format!("Secret {}", self.secret_ref());
        let (status, body) = self
            .kube
            .call(reqwest::Method::GET, &self.secret_path(), None)
            .await?;
        match status {
            200 if holds_no_pair(&body) => Ok(Found::Empty(body)),
            200 => Stored::from_secret(&body).map(Found::Pair).map_err(|e| {
                format!("{what} cannot be served: {e} (delete it and the webhook makes a new one)")
            }),
            404 => Ok(Found::Absent),
            _ => Err(refused(&format!("reading {what}"), status, &body)),
        }
    }

    /// Step 1: the Secret made (or `empty`, the one found without a pair, filled), with the
    /// CAs the `caBundle` carries now (and that of the certificate this replica serves)
    /// trusted around the switch. `None`: another replica made it first.
    async fn create(
        &self,
        now: SystemTime,
        empty: Option<Value>,
    ) -> Result<Option<Stored>, String> {
        let (names, bundle) = self.service_and_bundle().await?;
        let pair = Pair::generate(&names, self.settings.validity)?;
        let mine = self.serving.current_ca().unwrap_or_default();
        let previous = unexpired_cas(&format!("{bundle}{mine}"), &pair.ca, now);
        let resource_version = empty
            .as_ref()
            .and_then(|e| e["metadata"]["resourceVersion"].as_str())
            .map(str::to_string);
        let filled = empty.is_some();
        let stored = rotation(
            pair,
            previous,
            self.settings.overlap,
            now,
            resource_version,
            empty,
        );
        let secret = stored.to_secret(&self.namespace, &self.settings.secret);
        let (status, body) = if filled {
            let body = Some(("application/json", secret));
            self.kube
                .call(reqwest::Method::PUT, &self.secret_path(), body)
                .await?
        } else {
            let create = format!("/api/v1/namespaces/{}/secrets", self.namespace);
            let body = Some(("application/json", secret));
            self.kube.call(reqwest::Method::POST, &create, body).await?
        };
        match status {
            200 | 201 => {
                tracing::info!(
                    secret = %self.secret_ref(),
                    dns_names = %names.join(", "),
                    "made the webhook's CA and serving certificate and stored them in Secret {}{}{}",
                    self.secret_ref(),
                    if filled { " (which held none)" } else { "" },
                    self.overlap_note(&stored)
                );
                Ok(Some(Stored::from_secret(&body).unwrap_or(stored)))
            }
            // Another replica was first (or the Secret to fill changed or went meanwhile):
            // read it again.
            409 => Ok(None),
            404 if filled => Ok(None),
            _ => Err(refused(
                &format!(
                    "{} Secret {}",
                    if filled { "filling" } else { "creating" },
                    self.secret_ref()
                ),
                status,
                &body,
            )),
        }
    }

    fn overlap_note(&self, stored: &Stored) -> String {
        match stored.serve_from {
            Some(t) => format!(
                "; the previous CA stays in the caBundle beside the new one, which replicas serve from {} on",
                humantime::format_rfc3339_seconds(t)
            ),
            None => String::new(),
        }
    }

    /// Steps 2 to 4: `step` written (`PUT` with the `resourceVersion` read). `None`: another
    /// replica wrote first.
    async fn write(
        &self,
        stored: &Stored,
        validity: Validity,
        step: Step,
        now: SystemTime,
    ) -> Result<Option<Stored>, String> {
        let fresh = match step {
            Step::Renew { .. } => {
                let (names, _) = self.service_and_bundle().await?;
                Some(Pair::generate(&names, self.settings.validity)?)
            }
            _ => None,
        };
        let next = apply(stored, step, fresh, self.settings.overlap, now);
        let (status, body) = self
            .kube
            .call(
                reqwest::Method::PUT,
                &self.secret_path(),
                Some((
                    "application/json",
                    next.to_secret(&self.namespace, &self.settings.secret),
                )),
            )
            .await?;
        match status {
            200 | 201 => {}
            409 => return Ok(None),
            _ => {
                return Err(refused(
                    &format!("updating Secret {}", self.secret_ref()),
                    status,
                    &body,
                ))
            }
        }
        let secret = self.secret_ref();
        match step {
            Step::Renew { expired: true } => tracing::warn!(
                secret = %secret,
                expired = %validity.expires(),
                "the certificate in Secret {secret} expired at {}: replaced by a new CA and certificate, served at once (an expired one is never served)",
                validity.expires()
            ),
            Step::Renew { expired: false } => tracing::info!(
                secret = %secret,
                expires = %validity.expires(),
                "renewing the webhook's certificate (two thirds of its validity passed; it expires at {}): a new CA and certificate in Secret {secret}{}",
                validity.expires(),
                self.overlap_note(&next)
            ),
            Step::DropPrevious => tracing::info!(
                secret = %secret,
                "every replica serves the renewed certificate: the previous CA leaves the caBundle"
            ),
            Step::Keep => {}
        }
        Ok(Some(Stored::from_secret(&body).unwrap_or(next)))
    }

    /// Every entry's `caBundle` set to `bundle` (PEM); returns how many were changed, `None`
    /// if another writer changed the configuration meanwhile (its `resourceVersion` test
    /// failed: `409` or `422`).
    async fn ca_bundle(&self, bundle: &str) -> Result<Option<usize>, String> {
        let what = self.configuration_name();
        let body = self.configuration().await?;
        let encoded = base64::engine::general_purpose::STANDARD.encode(bundle);
        // Only if nobody changed the configuration since it was read.
        let mut ops: Vec<Value> = body["metadata"]["resourceVersion"]
            .as_str()
            .map(|rv| json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}))
            .into_iter()
            .collect();
        let tests = ops.len();
        for (i, w) in body["webhooks"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            if w["clientConfig"]["caBundle"].as_str() != Some(encoded.as_str()) {
                ops.push(json!({"op": "test", "path": format!("/webhooks/{i}/name"), "value": w["name"]}));
                ops.push(json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": encoded}));
            }
        }
        if ops.len() == tests {
            return Ok(Some(0));
        }
        let changed = (ops.len() - tests) / 2;
        let (status, body) = self
            .kube
            .call(
                reqwest::Method::PATCH,
                &self.configuration_path(),
                Some(("application/json-patch+json", Value::Array(ops))),
            )
            .await?;
        match status {
            200 => {}
            409 | 422 => return Ok(None),
            _ => return Err(refused(&format!("patching {what}"), status, &body)),
        }
        let cas = pem_blocks(bundle).count();
        tracing::info!(
            configuration = %self.settings.configuration,
            entries = changed,
            cas,
            "set the caBundle of {what} to the {} of Secret {}",
            if cas == 1 { "CA" } else { "CAs (new and previous)" },
            self.secret_ref()
        );
        Ok(Some(changed))
    }

    /// One sync at `now`: the Secret read (made, renewed, replaced or its previous CAs
    /// dropped, as [`plan`] says), the `caBundle` set to its CAs, and its certificate served.
    ///
    /// # Errors
    /// The first failure, in one line.
    pub async fn sync(&mut self, now: SystemTime) -> Result<Synced, String> {
        let mut stored = match self.read().await? {
            Found::Pair(s) => s,
            Found::Absent => match self.create(now, None).await? {
                Some(s) => s,
                None => return Ok(Synced::Again),
            },
            Found::Empty(empty) => match self.create(now, Some(empty)).await? {
                Some(s) => s,
                None => return Ok(Synced::Again),
            },
        };
        let mut validity = stored.pair.validity().map_err(|e| {
            format!(
                "Secret {} cannot be served: {e} (delete it and the webhook makes a new one)",
                self.secret_ref()
            )
        })?;
        let step = plan(&stored, validity, now);
        if step != Step::Keep {
            match self.write(&stored, validity, step, now).await? {
                Some(s) => stored = s,
                None => return Ok(Synced::Again),
            }
            validity = stored.pair.validity()?;
        }
        let bundle = stored.bundle();
        let encoded = base64::engine::general_purpose::STANDARD.encode(&bundle);
        let changed = self.stored.as_ref() != Some(&stored);
        let resync = self
            .checked
            .is_none_or(|t| t.elapsed() >= self.settings.resync);
        let mut outcome = Ok(Synced::Done);
        if changed || resync || self.confirmed.as_deref() != Some(encoded.as_str()) {
            self.checked = Some(Instant::now());
            match self.ca_bundle(&bundle).await {
                Ok(Some(_)) => self.confirmed = Some(encoded.clone()),
                Ok(None) => {
                    self.confirmed = None;
                    outcome = Ok(Synced::Again);
                }
                Err(e) => {
                    self.confirmed = None;
                    outcome = Err(e);
                }
            }
        }
        let trusted = self.confirmed.as_deref() == Some(encoded.as_str());
        self.serve(&stored, validity, trusted, now)?;
        self.stored = Some(stored);
        outcome
    }

    /// The Secret's certificate handed to the TLS server ([`ServingCert::offer`]).
    fn serve(
        &mut self,
        stored: &Stored,
        validity: Validity,
        trusted: bool,
        now: SystemTime,
    ) -> Result<(), String> {
        let first = !self.serving.ready();
        // A certificate whose CA the Secret no longer lists is not trusted any more.
        let bundle = stored.bundle();
        let distrusted = self
            .serving
            .current_ca()
            .is_some_and(|ca| pem_blocks(&ca).any(|b| !bundle.contains(b)));
        if self.serving.holds(&stored.pair) {
            self.serving
                .refresh(&stored.pair, stored.serve_from, trusted, distrusted, now);
        } else {
            let key = stored.pair.certified_key(&self.provider).map_err(|e| {
                format!(
                    "Secret {} cannot be served: {e} (delete it and the webhook makes a new one)",
                    self.secret_ref()
                )
            })?;
            self.untrusted_logged = false;
            let held = Held {
                key: Arc::new(key),
                pair: stored.pair.clone(),
                validity,
            };
            self.serving
                .offer(held, stored.serve_from, trusted, distrusted, now);
        }
        if first && self.serving.ready() {
            tracing::info!(
                secret = %self.secret_ref(),
                expires = %validity.expires(),
                "serving the certificate of Secret {} (it expires at {})",
                self.secret_ref(),
                validity.expires()
            );
        }
        let waiting = stored.serve_from.is_some_and(|t| now >= t) && !trusted;
        if waiting && !self.untrusted_logged && self.serving.holds(&stored.pair) {
            tracing::warn!(
                "not serving the renewed certificate yet: {} does not carry its CA (it is served once it does, or once the current one expires)",
                self.configuration_name()
            );
            self.untrusted_logged = true;
        }
        Ok(())
    }

    /// Syncs until the runtime shuts down: every Secret poll interval (at once after a lost
    /// race; sooner than the resync, 2 s doubling, after a failure, each distinct failure
    /// logged once), setting `gauges` to the certificate served.
    pub async fn run(mut self, gauges: CertificateGauges) {
        let mut last_error: Option<String> = None;
        let mut retry = self.settings.poll;
        loop {
            let wait = match self.sync(SystemTime::now()).await {
                Ok(pace) => {
                    if last_error.take().is_some() {
                        tracing::info!("the webhook's certificate and caBundle are in place again");
                    }
                    retry = self.settings.poll;
                    match pace {
                        Synced::Done => self.settings.poll,
                        Synced::Again => Duration::from_millis(100),
                    }
                }
                Err(e) => {
                    if last_error.as_deref() != Some(e.as_str()) {
                        tracing::warn!(
                            serving = self.serving.ready(),
                            "keeping the webhook's certificate: {e}; trying again in {}",
                            humantime::format_duration(retry)
                        );
                        last_error = Some(e);
                    }
                    let wait = retry;
                    retry = (retry * 2)
                        .min(self.settings.resync.max(self.settings.poll).min(MAX_RETRY));
                    wait
                }
            };
            gauges.set(self.serving.served(SystemTime::now()), true);
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec![
            "hook".to_string(),
            "hook.gpu".to_string(),
            "hook.gpu.svc".to_string(),
        ]
    }

    #[test]
    fn a_generated_pair_is_served_and_goes_through_a_secret() {
        let pair = Pair::generate(&names(), Duration::from_secs(86_400)).unwrap();
        let provider = rustls::crypto::ring::default_provider();
        pair.certified_key(&provider).unwrap();
        let stored = Stored::new(pair.clone());
        let secret = stored.to_secret("gpu", "hook-tls");
        assert_eq!(secret["type"], "kubernetes.io/tls");
        assert!(secret["data"].get(PREVIOUS_CA_KEY).is_none());
        assert!(secret["metadata"].get("annotations").is_none());
        assert_eq!(Stored::from_secret(&secret).unwrap(), stored);
        let mut broken = secret.clone();
        broken["data"]["tls.key"] = json!("!!");
        assert!(Stored::from_secret(&broken)
            .unwrap_err()
            .contains("data[\"tls.key\"] is not base64"));
        let other = Pair::generate(&names(), Duration::from_secs(86_400)).unwrap();
        let mixed = Pair {
            key: other.key,
            ..pair
        };
        assert!(mixed
            .certified_key(&provider)
            .unwrap_err()
            .contains("does not go with"));
    }

    /// A day's certificate is valid from 2.4 h before it was made (a tenth, at most an hour
    /// here: one hour) to a day after, and renewed two thirds of the way.
    #[test]
    fn validity_and_renewal_at_two_thirds() {
        let made = SystemTime::now();
        let pair = Pair::generate(&names(), Duration::from_secs(86_400)).unwrap();
        let v = pair.validity().unwrap();
        let after = |t: SystemTime| t.duration_since(made).unwrap_or_default().as_secs();
        let before = |t: SystemTime| made.duration_since(t).unwrap_or_default().as_secs();
        // X.509 times are whole seconds.
        assert!((3599..=3601).contains(&before(v.not_before)), "{v:?}");
        assert!((86_399..=86_401).contains(&after(v.not_after)), "{v:?}");
        let span = 86_400 + 3600;
        assert!(
            (span * 2 / 3 - 3600 - 2..=span * 2 / 3 - 3600 + 2).contains(&after(v.renewal())),
            "{v:?}"
        );
        assert!(!v.expired(made) && v.expired(made + Duration::from_secs(86_402)));
    }

    fn at(v: &Validity, fraction: f64) -> SystemTime {
        let span = v.not_after.duration_since(v.not_before).unwrap();
        v.not_before + span.mul_f64(fraction)
    }

    /// The life of a Secret: kept, renewed at two thirds with the old CA beside the new one,
    /// the old CA dropped after twice the overlap; an expired pair replaced without overlap.
    #[test]
    fn plan_renews_at_two_thirds_with_overlap_and_replaces_an_expired_pair() {
        let overlap = Duration::from_secs(30);
        let first = Stored::new(Pair::generate(&names(), Duration::from_secs(3600)).unwrap());
        let v = first.pair.validity().unwrap();
        assert_eq!(plan(&first, v, at(&v, 0.5)), Step::Keep);
        let now = at(&v, 0.67);
        let step = plan(&first, v, now);
        assert_eq!(step, Step::Renew { expired: false });
        // The new pair lasts longer, so that it is not due itself at these times.
        let fresh = Pair::generate(&names(), Duration::from_secs(36_000)).unwrap();
        let renewed = apply(&first, step, Some(fresh.clone()), overlap, now);
        assert_eq!(renewed.pair, fresh);
        assert_eq!(renewed.previous_ca.trim(), first.pair.ca.trim());
        assert_eq!(renewed.serve_from, Some(now + overlap));
        assert_eq!(renewed.previous_until, Some(now + overlap * 2));
        assert_eq!(
            renewed.bundle(),
            format!("{}\n{}\n", fresh.ca.trim(), first.pair.ca.trim())
        );
        // Through a Secret and back (times in whole seconds).
        let back = Stored::from_secret(&renewed.to_secret("gpu", "hook-tls")).unwrap();
        assert_eq!(
            (back.pair.clone(), back.previous_ca.clone()),
            (fresh.clone(), renewed.previous_ca.clone())
        );
        let v2 = fresh.validity().unwrap();
        assert_eq!(plan(&back, v2, now + overlap), Step::Keep);
        let later = now + overlap * 2 + Duration::from_secs(1);
        assert_eq!(plan(&back, v2, later), Step::DropPrevious);
        let dropped = apply(&back, Step::DropPrevious, None, overlap, later);
        assert_eq!(dropped.bundle(), format!("{}\n", fresh.ca.trim()));
        assert_eq!((dropped.serve_from, dropped.previous_until), (None, None));
        // Expired: replaced, nothing kept from before, served at once.
        let expired = plan(&first, v, v.not_after);
        assert_eq!(expired, Step::Renew { expired: true });
        let replaced = apply(&first, expired, Some(fresh.clone()), overlap, v.not_after);
        assert_eq!(replaced.bundle(), format!("{}\n", fresh.ca.trim()));
        assert_eq!(replaced.serve_from, None);
    }

    /// The served certificate changes at the Secret's time, only once the new CA is trusted,
    /// and at once when the current one has expired.
    #[test]
    fn the_next_certificate_is_served_at_its_time_once_trusted() {
        let provider = rustls::crypto::ring::default_provider();
        let held = |p: &Pair| Held {
            key: Arc::new(p.certified_key(&provider).unwrap()),
            pair: p.clone(),
            validity: p.validity().unwrap(),
        };
        let old = Pair::generate(&names(), Duration::from_secs(3600)).unwrap();
        let new = Pair::generate(&names(), Duration::from_secs(3600)).unwrap();
        let now = SystemTime::now();
        let from = now + Duration::from_secs(30);
        let serving = ServingCert::default();
        assert_eq!(serving.served(now), None);
        serving.offer(held(&old), None, false, false, now);
        assert_eq!(serving.served(now), Some(old.validity().unwrap()));
        serving.offer(held(&new), Some(from), false, false, now);
        assert!(serving.holds(&new));
        assert_eq!(serving.current_ca(), Some(old.ca.clone()));
        // Its time, but the caBundle not seen carrying it: the old one still.
        let _ = serving.served(from);
        assert_eq!(serving.current_ca(), Some(old.ca.clone()));
        serving.offer(held(&new), Some(from), true, false, now);
        let _ = serving.served(from - Duration::from_secs(1));
        assert_eq!(
            serving.current_ca(),
            Some(old.ca.clone()),
            "not before its time"
        );
        assert_eq!(serving.served(from), Some(new.validity().unwrap()));
        // An expired current certificate gives way at once.
        let serving = ServingCert::default();
        serving.offer(held(&old), None, false, false, now);
        serving.offer(held(&new), Some(from), false, false, now);
        let v = old.validity().unwrap();
        assert_eq!(serving.served(v.not_after), Some(new.validity().unwrap()));
    }

    /// kyverno/kyverno#12049 and #9736: after a renewal the old CA stayed in the Secret (and an
    /// expired one with it) for good. A Secret due for renewal whose `previous-ca.crt` still
    /// holds an expired CA and a valid one (a rotation whose end was never written): the
    /// renewal carries the current and the valid previous CA, not the expired one; at the
    /// end of the overlap all of them leave, and the caBundle is the new CA alone.
    #[test]
    fn renewal_carries_no_expired_ca_and_the_previous_ones_leave() {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        let now = SystemTime::now();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        p.not_before = (now - Duration::from_secs(7200)).into();
        p.not_after = (now - Duration::from_secs(60)).into();
        let expired = p.self_signed(&KeyPair::generate().unwrap()).unwrap().pem();
        let valid = Pair::generate(&names(), Duration::from_secs(3600))
            .unwrap()
            .ca;
        let current = Pair::generate(&names(), Duration::from_secs(3600)).unwrap();
        let stored = Stored {
            previous_ca: join_pem([expired.as_str(), valid.as_str()]),
            previous_until: Some(now - Duration::from_secs(1)),
            ..Stored::new(current.clone())
        };
        let v = current.validity().unwrap();
        let due = at(&v, 0.7);
        let step = plan(&stored, v, due);
        assert_eq!(step, Step::Renew { expired: false });
        let fresh = Pair::generate(&names(), Duration::from_secs(36_000)).unwrap();
        let overlap = Duration::from_secs(30);
        let renewed = apply(&stored, step, Some(fresh.clone()), overlap, due);
        assert_eq!(
            renewed.bundle(),
            join_pem([fresh.ca.as_str(), current.ca.as_str(), valid.as_str()])
        );
        let later = due + overlap * 2;
        let v2 = fresh.validity().unwrap();
        assert_eq!(plan(&renewed, v2, later), Step::DropPrevious);
        let dropped = apply(&renewed, Step::DropPrevious, None, overlap, later);
        assert_eq!(dropped.bundle(), join_pem([fresh.ca.as_str()]));
        let secret = dropped.to_secret("gpu", "hook-tls");
        assert!(secret["data"].get(PREVIOUS_CA_KEY).is_none(), "{secret}");
        assert_eq!(plan(&dropped, v2, later), Step::Keep);
    }

    /// A placeholder Secret is filled: one without data, an `Opaque` one with other keys
    /// only, a `kubernetes.io/tls` one with its two keys empty. One holding any part of a
    /// pair is not (it is someone's, or half written: refused by name).
    #[test]
    fn placeholders_hold_no_pair() {
        for empty in [
            json!({"type": "Opaque"}),
            json!({"type": "Opaque", "data": {"README": "aGk="}}),
            json!({"type": "kubernetes.io/tls", "data": {"tls.crt": "", "tls.key": ""}}),
        ] {
            assert!(holds_no_pair(&empty), "{empty}");
        }
        let pair = Stored::new(Pair::generate(&names(), Duration::from_secs(3600)).unwrap())
            .to_secret("gpu", "hook-tls");
        let mut half = json!({"type": "kubernetes.io/tls", "data": {"tls.crt": "", "tls.key": ""}});
        half["data"]["tls.crt"] = pair["data"]["tls.crt"].clone();
        for partial in [pair, half] {
            assert!(!holds_no_pair(&partial), "{partial}");
        }
    }

    #[test]
    fn bundles_hold_each_ca_once_and_expired_cas_are_left_out() {
        let a = Pair::generate(&names(), Duration::from_secs(3600)).unwrap();
        let b = Pair::generate(&names(), Duration::from_secs(3600)).unwrap();
        let both = join_pem([a.ca.as_str(), b.ca.as_str(), a.ca.as_str()]);
        assert_eq!(pem_blocks(&both).count(), 2);
        let now = SystemTime::now();
        assert_eq!(
            unexpired_cas(&both, &b.ca, now),
            format!("{}\n", a.ca.trim())
        );
        let late = a.validity().unwrap().not_after;
        assert_eq!(unexpired_cas(&both, "", late), "");
    }
}
