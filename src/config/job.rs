//! The pod's workload on the resource: which training job, replica and index the pod is, from
//! the pod's labels read through the Downward API, so that a job's pods can be grouped.
//!
//! Each label is one environment variable whose value the kubelet fills from the pod
//! (`valueFrom.fieldRef.fieldPath: metadata.labels['<key>']`; the chart's named templates
//! and the webhook write them): the variable of a label key is [`label_variable`]
//! (`K8S_POD_LABEL_` and the key upper-cased, every character other than a letter or digit
//! written `_`: `training.kubeflow.org/job-name` is
//! `K8S_POD_LABEL_TRAINING_KUBEFLOW_ORG_JOB_NAME`). Which keys are read is the setting
//! `GPU_SIDECAR_POD_LABELS` (default [`DEFAULT_POD_LABELS`]); each one set and not empty
//! becomes the semantic conventions' `k8s.pod.label.<key>`. The kubelet gives an empty
//! value for a label the pod does not have: it is absent from the resource, never `""`.
//!
//! Besides the list, three labels are always read for the semantic conventions'
//! `k8s.job.name` (a pod of a batch Job): `batch.kubernetes.io/job-name` (Kubernetes 1.27
//! and later), else `job-name` together with `controller-uid` (what the Job controller set
//! before 1.27; `job-name` alone is no proof of a Job: the Kubeflow training operator sets a
//! deprecated `job-name` on its pods too).

use std::collections::BTreeMap;

use super::settings as S;
use super::ConfigError;

/// Prefix of the variables that carry a pod label ([`label_variable`]).
pub const POD_LABEL_PREFIX: &str = "K8S_POD_LABEL_";

use crate::catalogue::resource::{
    K8S_JOB_NAME as JOB_NAME_ATTRIBUTE, K8S_POD_LABEL_PREFIX as POD_LABEL_ATTRIBUTE_PREFIX,
};

/// The label the Job controller puts on its pods (Kubernetes 1.27 and later): the Job's name.
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
/// The Job controller's label before 1.27 (still set alongside [`JOB_NAME_LABEL`]).
pub const LEGACY_JOB_NAME_LABEL: &str = "job-name";
/// The Job controller's pre-1.27 label of the Job's UID: with it, [`LEGACY_JOB_NAME_LABEL`]
/// names a Job.
pub const LEGACY_CONTROLLER_UID_LABEL: &str = "controller-uid";

/// The labels read for `k8s.job.name`, whatever `GPU_SIDECAR_POD_LABELS` says.
pub const JOB_LABELS: [&str; 3] = [
    JOB_NAME_LABEL,
    LEGACY_JOB_NAME_LABEL,
    LEGACY_CONTROLLER_UID_LABEL,
];

/// The default of `GPU_SIDECAR_POD_LABELS` (and of the chart's `podLabels`): the labels the
/// training operators put on their pods. Kubeflow's training operator (PyTorchJob, TFJob,
/// MPIJob v1, JAXJob, XGBoostJob, PaddleJob) and the MPI operator v2: job name, replica
/// type and index, job role; JobSet: JobSet, replicated job and job index, and the Indexed
/// Job's completion index; Volcano's job name; LeaderWorkerSet: name, group and worker
/// index.
pub const DEFAULT_POD_LABELS: &[&str] = &[
    "training.kubeflow.org/job-name",
    "training.kubeflow.org/replica-type",
    "training.kubeflow.org/replica-index",
    "training.kubeflow.org/job-role",
    "jobset.sigs.k8s.io/jobset-name",
    "jobset.sigs.k8s.io/replicatedjob-name",
    "jobset.sigs.k8s.io/job-index",
    "batch.kubernetes.io/job-completion-index",
    "volcano.sh/job-name",
    "leaderworkerset.sigs.k8s.io/name",
    "leaderworkerset.sigs.k8s.io/group-index",
    "leaderworkerset.sigs.k8s.io/worker-index",
];

/// The variable that carries the label `key`: [`POD_LABEL_PREFIX`] and the key upper-cased,
/// each character other than an ASCII letter or digit written `_`
/// (`volcano.sh/job-name` → `K8S_POD_LABEL_VOLCANO_SH_JOB_NAME`), a valid name for every
/// Kubernetes version (`[A-Z0-9_]`).
pub fn label_variable(key: &str) -> String {
    let mut v = String::from(POD_LABEL_PREFIX);
    v.extend(key.chars().map(|c| {
        if c.is_ascii_alphanumeric() {
            c.to_ascii_uppercase()
        } else {
            '_'
        }
    }));
    v
}

/// Whether `key` is a Kubernetes label key: an optional DNS subdomain prefix (at most 253
/// characters of lower-case letters, digits, `-` and `.`) and `/`, then a name of 1 to 63
/// letters, digits, `-`, `_` and `.` that starts and ends with a letter or digit.
pub fn is_label_key(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let edge = |s: &str| {
        s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && edge(name)
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                !part.is_empty()
                    && edge(part)
                    && part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            })
    });
    name_ok && prefix_ok
}

/// `GPU_SIDECAR_POD_LABELS`: a comma-separated list of label keys (blanks around them
/// ignored; `none` for no label), in the order given, without repeats.
///
/// # Errors
/// A [`ConfigError`] naming `GPU_SIDECAR_POD_LABELS` for a key that is no label key, or two
/// keys written with one variable. A key of [`JOB_LABELS`] (read anyway, for `k8s.job.name`)
/// may be listed: it is then also `k8s.pod.label.<key>`.
pub fn parse_pod_labels(value: &str) -> Result<Vec<String>, ConfigError> {
    let bad = |why: String| {
        ConfigError::new(
            S::POD_LABELS.name,
            value,
            format!("{} ({why})", S::POD_LABELS.accepts),
        )
    };
    if value.trim() == "none" {
        return Ok(Vec::new());
    }
    let mut keys: Vec<String> = Vec::new();
    for key in value.split(',').map(str::trim) {
        if !is_label_key(key) {
            return Err(bad(format!("{key:?} is not a label key")));
        }
        if keys.iter().any(|k| k == key) {
            continue;
        }
        if let Some(other) = keys
            .iter()
            .map(String::as_str)
            .chain(JOB_LABELS)
            // A key of JOB_LABELS is read anyway (for k8s.job.name); listed, it is also
            // exported as k8s.pod.label.<key>, from the same variable.
            .find(|k| *k != key && label_variable(k) == label_variable(key))
        {
            return Err(bad(format!(
                "{other:?} and {key:?} would both be read from {}",
                label_variable(key)
            )));
        }
        keys.push(key.to_string());
    }
    Ok(keys)
}

/// The workload's resource attributes from the variables: `k8s.job.name` (see the module's
/// docs) and `k8s.pod.label.<key>` for each of `keys` whose [`label_variable`] is set and
/// not empty (the value as given).
///
/// # Errors
/// A [`ConfigError`] for a [`POD_LABEL_PREFIX`] variable that carries none of `keys` nor
/// of [`JOB_LABELS`]: a label missing from `GPU_SIDECAR_POD_LABELS`, or a typo.
pub fn workload_attributes(
    vars: &BTreeMap<String, String>,
    keys: &[String],
) -> Result<BTreeMap<String, String>, ConfigError> {
    let wanted: Vec<String> = keys
        .iter()
        .map(String::as_str)
        .chain(JOB_LABELS)
        .map(label_variable)
        .collect();
    if let Some((var, value)) = vars
        .iter()
        .find(|(k, _)| k.starts_with(POD_LABEL_PREFIX) && !wanted.contains(k))
    {
        return Err(ConfigError::new(
            var,
            if value.is_empty() { "\"\"" } else { value },
            format!(
                "the variable of a label listed in {} (K8S_POD_LABEL_ and the key in capitals, '_' for other characters), or of {}",
                S::POD_LABELS.name,
                JOB_LABELS.join(", ")
            ),
        ));
    }
    let label = |key: &str| {
        vars.get(&label_variable(key))
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    };
    let mut out = BTreeMap::new();
    let job = label(JOB_NAME_LABEL)
        .or_else(|| label(LEGACY_CONTROLLER_UID_LABEL).and_then(|_| label(LEGACY_JOB_NAME_LABEL)));
    if let Some(job) = job {
        out.insert(JOB_NAME_ATTRIBUTE.to_string(), job.to_string());
    }
    for key in keys {
        if let Some(v) = label(key) {
            out.insert(format!("{POD_LABEL_ATTRIBUTE_PREFIX}{key}"), v.to_string());
        }
    }
    Ok(out)
}

/// The label variables `docs/settings.md` and `--help` list: those of [`JOB_LABELS`], then
/// those of [`DEFAULT_POD_LABELS`].
pub(super) fn documented_label_variables() -> impl Iterator<Item = String> {
    JOB_LABELS
        .iter()
        .chain(DEFAULT_POD_LABELS)
        .map(|k| label_variable(k))
}

/// The rows of `docs/settings.md`'s Downward API table for the label variables: those of
/// [`JOB_LABELS`], then those of [`DEFAULT_POD_LABELS`].
pub(super) fn label_rows_markdown() -> String {
    let mut s = String::new();
    for key in JOB_LABELS {
        s.push_str(&format!(
            "| `{}` | none | Downward API `metadata.labels['{key}']` → `{JOB_NAME_ATTRIBUTE}` (see `{}`) |\n",
            label_variable(key),
            S::POD_LABELS.name
        ));
    }
    for key in DEFAULT_POD_LABELS {
        s.push_str(&format!(
            "| `{}` | none | Downward API `metadata.labels['{key}']` → `{POD_LABEL_ATTRIBUTE_PREFIX}{key}` (a key of `{}`) |\n",
            label_variable(key),
            S::POD_LABELS.name
        ));
    }
    s
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

    fn defaults() -> Vec<String> {
        parse_pod_labels(S::POD_LABELS.default_value().unwrap()).unwrap()
    }

    #[test]
    fn the_settings_default_is_the_list() {
        assert_eq!(defaults(), DEFAULT_POD_LABELS);
    }

    #[test]
    fn variables_are_valid_names_and_distinct() {
        assert_eq!(
            label_variable("training.kubeflow.org/job-name"),
            "K8S_POD_LABEL_TRAINING_KUBEFLOW_ORG_JOB_NAME"
        );
        assert_eq!(
            label_variable("leaderworkerset.sigs.k8s.io/group-index"),
            "K8S_POD_LABEL_LEADERWORKERSET_SIGS_K8S_IO_GROUP_INDEX"
        );
        let mut all: Vec<String> = DEFAULT_POD_LABELS
            .iter()
            .chain(JOB_LABELS.iter())
            .map(|k| label_variable(k))
            .collect();
        assert!(all.iter().all(|v| v
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')));
        all.sort();
        all.dedup();
        assert_eq!(all.len(), DEFAULT_POD_LABELS.len() + JOB_LABELS.len());
    }

    #[test]
    fn a_pytorchjob_worker() {
        let got = workload_attributes(
            &vars(&[
                ("K8S_POD_LABEL_TRAINING_KUBEFLOW_ORG_JOB_NAME", "bert"),
                ("K8S_POD_LABEL_TRAINING_KUBEFLOW_ORG_REPLICA_TYPE", "worker"),
                ("K8S_POD_LABEL_TRAINING_KUBEFLOW_ORG_REPLICA_INDEX", "3"),
                // Labels the pod does not have: the kubelet gives "".
                ("K8S_POD_LABEL_JOBSET_SIGS_K8S_IO_JOBSET_NAME", ""),
                ("K8S_POD_LABEL_BATCH_KUBERNETES_IO_JOB_NAME", ""),
                // The training operator's deprecated label, without a Job's controller-uid.
                ("K8S_POD_LABEL_JOB_NAME", "bert"),
                ("K8S_POD_LABEL_CONTROLLER_UID", ""),
            ]),
            &defaults(),
        )
        .unwrap();
        assert_eq!(
            got,
            vars(&[
                ("k8s.pod.label.training.kubeflow.org/job-name", "bert"),
                ("k8s.pod.label.training.kubeflow.org/replica-index", "3"),
                ("k8s.pod.label.training.kubeflow.org/replica-type", "worker"),
            ])
        );
    }

    #[test]
    fn the_job_name_of_a_batch_job_old_and_new() {
        let keys = defaults();
        let new = workload_attributes(
            &vars(&[
                ("K8S_POD_LABEL_BATCH_KUBERNETES_IO_JOB_NAME", "resnet"),
                ("K8S_POD_LABEL_JOB_NAME", "resnet"),
                ("K8S_POD_LABEL_CONTROLLER_UID", "0b1c"),
            ]),
            &keys,
        )
        .unwrap();
        assert_eq!(new, vars(&[("k8s.job.name", "resnet")]));
        let old = workload_attributes(
            &vars(&[
                ("K8S_POD_LABEL_BATCH_KUBERNETES_IO_JOB_NAME", ""),
                ("K8S_POD_LABEL_JOB_NAME", "resnet-old"),
                ("K8S_POD_LABEL_CONTROLLER_UID", "0b1c"),
            ]),
            &keys,
        )
        .unwrap();
        assert_eq!(old, vars(&[("k8s.job.name", "resnet-old")]));
        assert_eq!(workload_attributes(&vars(&[]), &keys).unwrap(), vars(&[]));
    }

    #[test]
    fn a_label_variable_outside_the_list_is_refused() {
        let err = workload_attributes(
            &vars(&[("K8S_POD_LABEL_TEAM", "vision")]),
            &["training.kubeflow.org/job-name".to_string()],
        )
        .unwrap_err();
        assert_eq!(err.var, "K8S_POD_LABEL_TEAM");
        assert!(err.to_string().contains("GPU_SIDECAR_POD_LABELS"), "{err}");
        let ok = workload_attributes(
            &vars(&[("K8S_POD_LABEL_TEAM", "vision")]),
            &["team".to_string()],
        )
        .unwrap();
        assert_eq!(ok, vars(&[("k8s.pod.label.team", "vision")]));
    }

    #[test]
    fn bad_lists_name_the_setting() {
        for (value, why) in [
            ("Team/x", "not a label key"),
            ("a/b/c", "not a label key"),
            ("-team", "not a label key"),
            ("team,", "not a label key"),
            ("a.b,a-b", "would both be read from K8S_POD_LABEL_A_B"),
            ("job_name", "would both be read from K8S_POD_LABEL_JOB_NAME"),
        ] {
            let err = parse_pod_labels(value).unwrap_err();
            assert_eq!(err.var, "GPU_SIDECAR_POD_LABELS");
            assert!(err.to_string().contains(why), "{value}: {err}");
        }
        assert_eq!(parse_pod_labels("none").unwrap(), Vec::<String>::new());
        // A Job's own label may be listed too: read anyway, and then also a pod label.
        assert_eq!(
            parse_pod_labels("batch.kubernetes.io/job-name,job-name").unwrap(),
            ["batch.kubernetes.io/job-name", "job-name"]
        );
        let attrs = workload_attributes(
            &vars(&[("K8S_POD_LABEL_BATCH_KUBERNETES_IO_JOB_NAME", "resnet")]),
            &parse_pod_labels("batch.kubernetes.io/job-name").unwrap(),
        )
        .unwrap();
        assert_eq!(
            attrs,
            vars(&[
                ("k8s.job.name", "resnet"),
                ("k8s.pod.label.batch.kubernetes.io/job-name", "resnet"),
            ])
        );
        assert_eq!(
            parse_pod_labels(" team , example.com/Run_ID ,team").unwrap(),
            ["team", "example.com/Run_ID"]
        );
    }
}
