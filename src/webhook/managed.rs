//! A serving certificate the webhook keeps itself (`GPU_SIDECAR_WEBHOOK_TLS_SECRET`), so that
//! the chart's rendered manifests carry no key material and every `helm template` (Argo CD,
//! Flux, `helm template | kubectl apply`) renders the same objects: nothing a sync applies can
//! make the API server trust a CA the webhook does not serve.
//!
//! At start, and every `GPU_SIDECAR_WEBHOOK_RESYNC_INTERVAL` (2 s, doubling, after a failure):
//! 1. `GET` the Secret (the webhook's namespace). Absent: the webhook makes a CA and a serving
//!    certificate it signs (rcgen, ECDSA P-256, for the Service the configuration names:
//!    `<service>`, `<service>.<namespace>`, `<service>.<namespace>.svc`) and `POST`s them
//!    (`ca.crt`, `tls.crt`, `tls.key`, type `kubernetes.io/tls`; the CA's key is not kept).
//!    Another replica that created it first (`409 Conflict`) wins: its Secret is read and
//!    served. The pair read is served from the next TLS handshake on ([`ServingCert`]).
//! 2. `GET` the `MutatingWebhookConfiguration` and, for each entry whose `caBundle` is not the
//!    Secret's CA, set it with a JSON patch (`test` of the entry's name first, so a
//!    configuration changed meanwhile is not patched blindly).
//!
//! The API server is reached as in-cluster clients do: `KUBERNETES_SERVICE_HOST` and `_PORT`,
//! the service account's `ca.crt` as the only trust, its `token` (re-read for each request,
//! as the kubelet rotates it). The chart's Role and ClusterRole allow exactly these calls.
//! Renewal: delete the Secret; within one resync a replica makes a new one and sets the
//! `caBundle`, and the others serve it at their next resync.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use base64::Engine as _;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use serde_json::{json, Value};

use super::settings::ManagedSettings;

/// The certificate served now, swapped in by the sync task; `None` until the first one.
#[derive(Debug)]
pub struct ServingCert {
    current: RwLock<Option<Arc<CertifiedKey>>>,
}

impl ServingCert {
    fn new() -> Self {
        Self {
            current: RwLock::new(None),
        }
    }

    fn set(&self, key: Arc<CertifiedKey>) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Some(key);
    }

    /// Whether a certificate is served yet.
    pub fn ready(&self) -> bool {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// The Secret's contents, PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pair {
    /// `ca.crt`: what `caBundle` holds.
    pub ca: String,
    /// `tls.crt`.
    pub cert: String,
    /// `tls.key`.
    pub key: String,
}

impl Pair {
    /// Makes a CA and a serving certificate for `names`, valid `validity` from an hour ago.
    ///
    /// # Errors
    /// rcgen's message (it does not fail for these inputs).
    pub fn generate(names: &[String], validity: Duration) -> Result<Self, String> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
            KeyUsagePurpose,
        };
        let e = |e: rcgen::Error| format!("cannot make the certificate: {e}");
        let now = std::time::SystemTime::now();
        let period = |p: &mut CertificateParams| {
            p.not_before = (now - Duration::from_secs(3600)).into();
            p.not_after = (now + validity).into();
        };
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(e)?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        let first = names
            .first()
            .map_or("gpu-otel-sidecar-webhook", String::as_str);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("{first} CA"));
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

    fn from_secret(secret: &Value) -> Result<Self, String> {
        let field = |name: &str| -> Result<String, String> {
            let b64 = secret["data"][name]
                .as_str()
                .ok_or_else(|| format!("it has no data[{name:?}]"))?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| format!("data[{name:?}] is not base64 ({e})"))?;
            String::from_utf8(bytes).map_err(|_| format!("data[{name:?}] is not PEM text"))
        };
        Ok(Self {
            ca: field("ca.crt")?,
            cert: field("tls.crt")?,
            key: field("tls.key")?,
        })
    }

    fn to_secret(&self, namespace: &str, name: &str) -> Value {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/managed-by": "gpu-otel-sidecar-webhook"},
            },
            "type": "kubernetes.io/tls",
            "data": {"ca.crt": b64(&self.ca), "tls.crt": b64(&self.cert), "tls.key": b64(&self.key)},
        })
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

/// The certificate's keeper: the settings, the API client and what is served.
pub struct Keeper {
    settings: ManagedSettings,
    namespace: String,
    kube: Kube,
    provider: Arc<CryptoProvider>,
    serving: Arc<ServingCert>,
    /// The pair served now.
    served: Option<Pair>,
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
            serving: Arc::new(ServingCert::new()),
            served: None,
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

    /// The DNS names of the Service the configuration's entries call.
    async fn service_names(&self) -> Result<Vec<String>, String> {
        let what = self.configuration_name();
        let body = self.configuration().await?;
        let service = body["webhooks"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|w| w["clientConfig"]["service"].as_object())
            .ok_or_else(|| format!("{what} has no entry calling a Service"))?;
        let name = service["name"].as_str().unwrap_or_default();
        let namespace = service["namespace"].as_str().unwrap_or(&self.namespace);
        Ok(vec![
            name.to_string(),
            format!("{name}.{namespace}"),
            format!("{name}.{namespace}.svc"),
        ])
    }

    /// Step 1: the Secret, read or made.
    async fn secret(&self) -> Result<Pair, String> {
        let path = format!(
            "/api/v1/namespaces/{}/secrets/{}",
            self.namespace, self.settings.secret
        );
        let what = format!("Secret {}", self.secret_ref());
        let (status, body) = self.kube.call(reqwest::Method::GET, &path, None).await?;
        match status {
            200 => {
                return Pair::from_secret(&body).map_err(|e| {
                    format!(
                        "{what} cannot be served: {e} (delete it and the webhook makes a new one)"
                    )
                })
            }
            404 => {}
            _ => return Err(refused(&format!("reading {what}"), status, &body)),
        }
        let names = self.service_names().await?;
        let pair = Pair::generate(&names, self.settings.validity)?;
        let create = format!("/api/v1/namespaces/{}/secrets", self.namespace);
        let (status, body) = self
            .kube
            .call(
                reqwest::Method::POST,
                &create,
                Some((
                    "application/json",
                    pair.to_secret(&self.namespace, &self.settings.secret),
                )),
            )
            .await?;
        match status {
            200 | 201 => {
                tracing::info!(
                    secret = %self.secret_ref(),
                    dns_names = %names.join(", "),
                    "made the webhook's CA and serving certificate and stored them in Secret {}",
                    self.secret_ref()
                );
                Ok(pair)
            }
            // Another replica was first: serve its pair.
            409 => {
                let (status, body) = self.kube.call(reqwest::Method::GET, &path, None).await?;
                if status != 200 {
                    return Err(refused(&format!("reading {what}"), status, &body));
                }
                Pair::from_secret(&body).map_err(|e| format!("{what} cannot be served: {e}"))
            }
            _ => Err(refused(&format!("creating {what}"), status, &body)),
        }
    }

    /// Step 2: every entry's `caBundle` set to `ca`; returns how many were changed.
    async fn ca_bundle(&self, ca: &str) -> Result<usize, String> {
        let what = self.configuration_name();
        let body = self.configuration().await?;
        let bundle = base64::engine::general_purpose::STANDARD.encode(ca);
        let mut ops = Vec::new();
        for (i, w) in body["webhooks"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            if w["clientConfig"]["caBundle"].as_str() != Some(bundle.as_str()) {
                ops.push(json!({"op": "test", "path": format!("/webhooks/{i}/name"), "value": w["name"]}));
                ops.push(json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": bundle}));
            }
        }
        if ops.is_empty() {
            return Ok(0);
        }
        let changed = ops.len() / 2;
        let (status, body) = self
            .kube
            .call(
                reqwest::Method::PATCH,
                &self.configuration_path(),
                Some(("application/json-patch+json", Value::Array(ops))),
            )
            .await?;
        if status != 200 {
            return Err(refused(&format!("patching {what}"), status, &body));
        }
        tracing::info!(
            configuration = %self.settings.configuration,
            entries = changed,
            "set the caBundle of {what} to the CA of Secret {}",
            self.secret_ref()
        );
        Ok(changed)
    }

    /// One sync: the Secret read (or made) and served, then the `caBundle` set.
    ///
    /// # Errors
    /// The first failure, in one line.
    pub async fn sync(&mut self) -> Result<(), String> {
        let pair = self.secret().await?;
        if self.served.as_ref() != Some(&pair) {
            let key = pair.certified_key(&self.provider).map_err(|e| {
                format!(
                    "Secret {} cannot be served: {e} (delete it and the webhook makes a new one)",
                    self.secret_ref()
                )
            })?;
            if self.served.is_some() {
                tracing::info!(
                    secret = %self.secret_ref(),
                    "Secret {} changed: serving its certificate from the next handshake on",
                    self.secret_ref()
                );
            }
            self.serving.set(Arc::new(key));
            self.served = Some(pair.clone());
        }
        self.ca_bundle(&pair.ca).await.map(|_| ())
    }

    /// Syncs until the runtime shuts down: every resync interval, sooner (2 s, doubling)
    /// after a failure, each distinct failure logged once.
    pub async fn run(mut self) {
        let mut last_error: Option<String> = None;
        let mut retry = Duration::from_secs(2);
        loop {
            let wait = match self.sync().await {
                Ok(()) => {
                    if last_error.take().is_some() {
                        tracing::info!("the webhook's certificate and caBundle are in place again");
                    }
                    retry = Duration::from_secs(2);
                    self.settings.resync
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
                    let wait = retry.min(self.settings.resync);
                    retry = (retry * 2).min(self.settings.resync);
                    wait
                }
            };
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_pair_is_served_and_goes_through_a_secret() {
        let names = vec![
            "hook".to_string(),
            "hook.gpu".to_string(),
            "hook.gpu.svc".to_string(),
        ];
        let pair = Pair::generate(&names, Duration::from_secs(86_400)).unwrap();
        let provider = rustls::crypto::ring::default_provider();
        pair.certified_key(&provider).unwrap();
        let secret = pair.to_secret("gpu", "hook-tls");
        assert_eq!(secret["type"], "kubernetes.io/tls");
        assert_eq!(Pair::from_secret(&secret).unwrap(), pair);
        let mut broken = secret.clone();
        broken["data"]["tls.key"] = json!("!!");
        assert!(Pair::from_secret(&broken)
            .unwrap_err()
            .contains("data[\"tls.key\"] is not base64"));
        let other = Pair::generate(&names, Duration::from_secs(86_400)).unwrap();
        let mixed = Pair {
            key: other.key,
            ..pair
        };
        assert!(mixed
            .certified_key(&provider)
            .unwrap_err()
            .contains("does not go with"));
    }
}
