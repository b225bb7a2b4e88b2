//! One AdmissionReview in, one answer out: [`answer`] parses the body (kube-core's
//! `AdmissionReview`, the pod's metadata and spec as k8s-openapi's `ObjectMeta` and
//! `PodSpec`), asks the [`Injector`], and writes the response review with its JSON patch, or
//! a 400 with a clear message for a body that is not an AdmissionReview. It logs one line per
//! review. No I/O: the server calls it.
//!
//! Everything is parsed from one `serde_json::Value` of the body, and the response is
//! written from kube-core's `AdmissionResponse` alone: the k8s-openapi parsers are then built
//! once (for that one deserializer), and no k8s-openapi serializer at all, which keeps
//! about a megabyte out of the binary.

use std::collections::HashMap;

use kube_core::admission::{
    AdmissionRequest, AdmissionResponse, AdmissionReview, Operation, META_API_VERSION_V1,
    META_API_VERSION_V1BETA1, META_KIND,
};
use kube_core::DynamicObject;
use serde_json::Value;

use super::inject::{Admission, Injector, Outcome, PodView, Scope};

/// The HTTP answer to one `POST /mutate` or `/mutate/namespace`.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// 200 with an AdmissionReview, or 400 for a body that is not one.
    pub status: u16,
    /// `application/json` (200) or `text/plain` (400).
    pub content_type: &'static str,
    /// The response AdmissionReview, or the error message.
    pub body: Vec<u8>,
    /// What was done (counted in `gpu_sidecar.webhook.admissions`).
    pub outcome: Outcome,
    /// The request's `dryRun` (`None` for a body that is not a review): a dry run
    /// (`kubectl apply --dry-run=server`, Argo CD's diff) creates no pod and is counted apart.
    pub dry_run: Option<bool>,
}

impl Answer {
    fn invalid(message: String) -> Self {
        tracing::warn!("malformed AdmissionReview answered 400: {message}");
        Self {
            status: 400,
            content_type: "text/plain; charset=utf-8",
            body: format!("gpu-otel-sidecar webhook: {message}\n").into_bytes(),
            outcome: Outcome::Invalid,
            dry_run: None,
        }
    }

    fn review(response: AdmissionResponse, outcome: Outcome, dry_run: bool) -> Self {
        match encode(response) {
            Ok(body) => Self {
                status: 200,
                content_type: "application/json",
                body,
                outcome,
                dry_run: Some(dry_run),
            },
            // Serializing plain strings, maps and bytes does not fail.
            Err(e) => Self::invalid(format!("cannot encode the response: {e}")),
        }
    }
}

/// The response review as JSON: the request's `apiVersion` and `kind` around the
/// response, with `response.patch` as the API documents it, a base64 string (Go's encoding
/// of `[]byte`). kube-core 2 serializes its `Vec<u8>` as an array of numbers (kube-rs issue
/// #1781), which the API server's decoder happens to accept too; the documented form does not
/// depend on that.
fn encode(response: AdmissionResponse) -> Result<Vec<u8>, serde_json::Error> {
    use base64::Engine as _;
    let types = response.types.clone();
    let mut r = serde_json::to_value(&response)?;
    if let Some(patch) = &response.patch {
        r["patch"] = Value::String(base64::engine::general_purpose::STANDARD.encode(patch));
    }
    serde_json::to_vec(&serde_json::json!({
        "apiVersion": types.api_version,
        "kind": types.kind,
        "response": r,
    }))
}

/// Answers one request body.
pub fn answer(injector: &Injector, scope: Scope, body: &[u8]) -> Answer {
    if body.is_empty() {
        return Answer::invalid(
            "empty body: expected an AdmissionReview (admission.k8s.io/v1) in JSON".into(),
        );
    }
    let not_a_review = |e: serde_json::Error| {
        Answer::invalid(format!(
            "the body is not an AdmissionReview (admission.k8s.io/v1) in JSON: {e}"
        ))
    };
    let mut json: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return not_a_review(e),
    };
    // The pod is parsed below, as a `PodView`, from the object as it came.
    let object = json
        .get_mut("request")
        .and_then(|r| r.get_mut("object"))
        .map(Value::take);
    let review: AdmissionReview<DynamicObject> = match serde_json::from_value(json) {
        Ok(r) => r,
        Err(e) => return not_a_review(e),
    };
    if review.types.kind != META_KIND
        || ![META_API_VERSION_V1, META_API_VERSION_V1BETA1]
            .contains(&review.types.api_version.as_str())
    {
        return Answer::invalid(format!(
            "expected kind AdmissionReview, apiVersion admission.k8s.io/v1 (or v1beta1); got kind {:?}, apiVersion {:?}",
            review.types.kind, review.types.api_version
        ));
    }
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(r) => r,
        Err(_) => return Answer::invalid("the AdmissionReview has no request".into()),
    };
    let response = AdmissionResponse::from(&request);
    let is_pod_create = request.kind.group.is_empty()
        && request.kind.kind == "Pod"
        && request.operation == Operation::Create
        && request.sub_resource.as_deref().unwrap_or("").is_empty();
    if !is_pod_create {
        tracing::debug!(
            uid = %request.uid,
            kind = %request.kind.kind,
            operation = match request.operation {
                Operation::Create => "CREATE",
                Operation::Update => "UPDATE",
                Operation::Delete => "DELETE",
                Operation::Connect => "CONNECT",
            },
            "not a pod being created: admitted unchanged"
        );
        return Answer::review(response, Outcome::Ignored, request.dry_run);
    }
    let Some(object) = object.filter(|o| !o.is_null()) else {
        return Answer::invalid("the request creates a pod but carries no object".into());
    };
    let spec = object.get("spec").cloned().unwrap_or(Value::Null);
    let pod: PodView = match serde_json::from_value(object) {
        Ok(p) => p,
        Err(e) => return Answer::invalid(format!("request.object is not a v1 Pod: {e}")),
    };
    let decision = injector.admit(scope, &pod, &spec);
    log(&request, &pod, &decision);
    let outcome = decision.outcome;
    let mut response = response;
    response.audit_annotations =
        HashMap::from([("outcome".to_string(), outcome.as_str().to_string())]);
    if let Some(exit) = decision.exit {
        response
            .audit_annotations
            .insert("classic-exit".to_string(), exit.as_str().to_string());
    }
    let dry_run = request.dry_run;
    match decision.patch {
        Some(patch) => match response.with_patch(patch) {
            Ok(r) => Answer::review(r, outcome, dry_run),
            Err(e) => Answer::invalid(format!("cannot encode the patch: {e}")),
        },
        None => {
            if decision.warn {
                response.warnings = Some(vec![format!(
                    "gpu-otel-sidecar: not injected: {}",
                    decision.reason
                )]);
            }
            response.result.message = decision.reason;
            Answer::review(response, outcome, dry_run)
        }
    }
}

/// One line per review: `info` for an injection and for a pod that asked for the sidecar
/// but did not get it, `debug` for the others. The pod's name is empty at admission when it
/// is generated (`metadata.generateName`, as controllers create pods): then it is shown as
/// the prefix followed by `*`.
fn log(request: &AdmissionRequest<DynamicObject>, pod: &PodView, decision: &Admission) {
    let namespace = request
        .namespace
        .as_deref()
        .or(pod.metadata.namespace.as_deref())
        .unwrap_or("");
    let name = match (
        pod.metadata.name.as_deref(),
        pod.metadata.generate_name.as_deref(),
    ) {
        (Some(n), _) if !n.is_empty() => n.to_string(),
        (_, Some(prefix)) => format!("{prefix}*"),
        _ => request.name.clone(),
    };
    let target = decision.target.as_deref().unwrap_or("");
    let outcome = decision.outcome.as_str();
    if decision.outcome == Outcome::Injected || decision.requested {
        tracing::info!(
            k8s.namespace.name = namespace,
            k8s.pod.name = %name,
            k8s.container.name = target,
            outcome,
            uid = %request.uid,
            dry_run = request.dry_run,
            "{}",
            decision.reason
        );
    } else {
        tracing::debug!(
            k8s.namespace.name = namespace,
            k8s.pod.name = %name,
            outcome,
            uid = %request.uid,
            "{}",
            decision.reason
        );
    }
}
