//! The training job a run report belongs to ([`JobIdentity`], the report's `job`), and a
//! job's report made from its pods' reports (the `merge` command, [`merge`]).
//!
//! A job is many pods, each with its own sidecar and its own run report. The job's name is
//! taken from the pod's resource, in the order the Prometheus rules use
//! (`docker/prometheus-rules.yaml`, `gpu_sidecar:job_member`): the JobSet's name, else the
//! Kubeflow training operator's (PyTorchJob, TFJob, MPIJob, …), else Volcano's, else the
//! LeaderWorkerSet's, else the batch Job's (`k8s.job.name`); the namespace is
//! `k8s.namespace.name` (see [`crate::config::job`] for where the labels come from).

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::catalogue::resource::{K8S_JOB_NAME, K8S_NAMESPACE_NAME, K8S_POD_NAME};

/// Resource attributes that name a pod's job, highest precedence first.
pub const JOB_NAME_SOURCES: &[&str] = &[
    "k8s.pod.label.jobset.sigs.k8s.io/jobset-name",
    "k8s.pod.label.training.kubeflow.org/job-name",
    "k8s.pod.label.volcano.sh/job-name",
    "k8s.pod.label.leaderworkerset.sigs.k8s.io/name",
    K8S_JOB_NAME,
];

/// The event name of a job's report (one JSON object per job, from [`merge`]).
pub const JOB_REPORT_EVENT: &str = "gpu.job.report";

/// Which job a pod's run belongs to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct JobIdentity {
    /// `k8s.namespace.name`, when known.
    pub namespace: Option<String>,
    /// The job's name.
    pub name: String,
    /// The resource attribute it was taken from (one of [`JOB_NAME_SOURCES`]).
    pub from: &'static str,
}

/// The job of a pod whose resource is `resource` (see the module's docs); `None` for a pod
/// of no job (no attribute of [`JOB_NAME_SOURCES`]).
pub fn job_identity(resource: &BTreeMap<String, String>) -> Option<JobIdentity> {
    JOB_NAME_SOURCES.iter().find_map(|from| {
        resource
            .get(*from)
            .filter(|v| !v.is_empty())
            .map(|name| JobIdentity {
                namespace: resource.get(K8S_NAMESPACE_NAME).cloned(),
                name: name.clone(),
                from,
            })
    })
}

/// The pod figures (`pod.<field>`) a job's report adds up: GPU-seconds busy, energy (J,
/// kWh), cost, idle cost and idle GPU-hours holding memory.
const SUMMED: &[&str] = &[
    "busy_gpu_s",
    "energy_j",
    "energy_kwh",
    "cost",
    "idle_cost",
    "idle_memory_held_gpu_h",
];

/// The job reports of `reports` (run reports as JSON, [`super::read::load_report`]), one per
/// job, ordered by namespace and name:
///
/// ```json
/// {"event.name": "gpu.job.report", "job": {"namespace", "name", "from"}, "pods": 4,
///  (keys in alphabetical order)
///  "gpu_count": 32, "started_at": "…", "ended_at": "…",
///  "busy_gpu_s": …, "energy_j": …, "energy_kwh": …, "cost": …, "idle_cost": …,
///  "idle_memory_held_gpu_h": …, "utilization_mean": …, "utilization_spread": …,
///  "workers": [{"k8s.pod.name", "gpu_count", "utilization_mean", "energy_j", "cost"}, …],
///  "notes": […]}
/// ```
///
/// Sums are of the pods' figures (`pod` of each report), at full precision as the run report
/// writes them; one absent in any report makes the sum absent (`null`, with a note), never a
/// partial total. `utilization_mean` is the pods' means weighted by their samples taken;
/// `utilization_spread` the highest pod mean minus the lowest. `workers` are ordered from the least busy: a straggler comes first. `started_at` is
/// the earliest pod's first sample, `ended_at` the latest's last.
///
/// A report given twice (the same pod, `k8s.pod.uid` or else `k8s.pod.name`, and the same
/// `started_at`: a copy caught by a glob) is counted once, with a note; a pod with several
/// runs (a sidecar restarted: different `started_at`) has each run added up, counted as one
/// pod in `pods`, with a note.
///
/// # Errors
/// The index (in `reports`) of a report whose resource names no job, with that message.
pub fn merge(reports: &[Value]) -> Result<Vec<Value>, (usize, String)> {
    let mut jobs: BTreeMap<JobIdentity, Vec<&Value>> = BTreeMap::new();
    let mut repeats: BTreeMap<JobIdentity, Vec<String>> = BTreeMap::new();
    let mut seen: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (i, r) in reports.iter().enumerate() {
        let resource: BTreeMap<String, String> = r["resource"]
            .as_object()
            .map(|o| {
                o.iter()
                    .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let job = job_identity(&resource).ok_or_else(|| {
            (
                i,
                format!(
                    "its resource names no job (one of {}: the sidecar's pod labels, docs/kubernetes.md#jobs)",
                    JOB_NAME_SOURCES.join(", ")
                ),
            )
        })?;
        let run = (
            pod_key(r),
            r["started_at"].as_str().unwrap_or_default().to_string(),
        );
        if let Some(first) = seen.get(&run) {
            repeats.entry(job).or_default().push(format!(
                "report {} repeats report {} (pod {}, started {}): counted once",
                i + 1,
                first + 1,
                run.0,
                run.1
            ));
            continue;
        }
        seen.insert(run, i);
        jobs.entry(job).or_default().push(r);
    }
    Ok(jobs
        .into_iter()
        .map(|(job, pods)| {
            let notes = repeats.remove(&job).unwrap_or_default();
            job_report(&job, &pods, notes)
        })
        .collect())
}

/// The pod a report is of: its `k8s.pod.uid`, else its `k8s.pod.name`.
fn pod_key(r: &Value) -> String {
    let res = &r["resource"];
    res["k8s.pod.uid"]
        .as_str()
        .or_else(|| res["k8s.pod.name"].as_str())
        .unwrap_or_default()
        .to_string()
}

fn job_report(job: &JobIdentity, pods: &[&Value], mut notes: Vec<String>) -> Value {
    let mut out = Map::new();
    out.insert("event.name".into(), json!(JOB_REPORT_EVENT));
    out.insert("job".into(), json!(job));
    let mut runs: BTreeMap<String, usize> = BTreeMap::new();
    for r in pods {
        *runs.entry(pod_key(r)).or_default() += 1;
    }
    for (pod, n) in runs.iter().filter(|(_, n)| **n > 1) {
        notes.push(format!(
            "pod {pod}: {n} runs (the sidecar restarted), each added up"
        ));
    }
    out.insert("pods".into(), json!(runs.len()));
    let gpu_count = |r: &Value| r["gpus"].as_array().map_or(0, Vec::len);
    out.insert(
        "gpu_count".into(),
        json!(pods.iter().map(|r| gpu_count(r)).sum::<usize>()),
    );
    // RFC 3339 UTC with the same precision: ordered as strings.
    let started = pods.iter().filter_map(|r| r["started_at"].as_str()).min();
    let ended = pods.iter().filter_map(|r| r["ended_at"].as_str()).max();
    out.insert("started_at".into(), json!(started));
    out.insert("ended_at".into(), json!(ended));
    for key in SUMMED {
        let values: Vec<Option<f64>> = pods.iter().map(|r| r["pod"][key].as_f64()).collect();
        let missing = values.iter().filter(|v| v.is_none()).count();
        if missing > 0 {
            notes.push(format!(
                "{key}: absent in {missing} of {} pod reports, so not added up",
                pods.len()
            ));
        }
        let sum = (missing == 0).then(|| values.iter().flatten().sum::<f64>());
        out.insert((*key).into(), json!(sum));
    }
    let means: Vec<(f64, f64)> = pods
        .iter()
        .filter_map(|r| {
            let mean = r["pod"]["utilization_mean"].as_f64()?;
            Some((mean, r["pod"]["samples_taken"].as_f64().unwrap_or(0.0)))
        })
        .collect();
    let weight: f64 = means.iter().map(|(_, n)| n).sum();
    let mean = (means.len() == pods.len() && weight > 0.0)
        .then(|| means.iter().map(|(m, n)| m * n).sum::<f64>() / weight);
    if mean.is_none() {
        notes.push("utilization_mean: absent in a pod report".into());
    }
    out.insert("utilization_mean".into(), json!(mean));
    let spread = (means.len() == pods.len()).then(|| {
        let hi = means.iter().map(|(m, _)| *m).fold(f64::MIN, f64::max);
        let lo = means.iter().map(|(m, _)| *m).fold(f64::MAX, f64::min);
        hi - lo
    });
    out.insert("utilization_spread".into(), json!(spread));
    let mut workers: Vec<Value> = pods
        .iter()
        .map(|r| {
            json!({
                K8S_POD_NAME: r["resource"][K8S_POD_NAME],
                "gpu_count": gpu_count(r),
                "utilization_mean": r["pod"]["utilization_mean"],
                "energy_j": r["pod"]["energy_j"],
                "cost": r["pod"]["cost"],
            })
        })
        .collect();
    workers.sort_by(|a, b| {
        let u = |w: &Value| w["utilization_mean"].as_f64().unwrap_or(f64::MAX);
        u(a).total_cmp(&u(b))
    });
    out.insert("workers".into(), Value::Array(workers));
    out.insert("notes".into(), json!(notes));
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_jobset_pod_is_its_jobset_not_its_child_job() {
        let id = job_identity(&resource(&[
            ("k8s.namespace.name", "llm"),
            ("k8s.job.name", "llama-workers-1"),
            ("k8s.pod.label.jobset.sigs.k8s.io/jobset-name", "llama"),
        ]))
        .unwrap();
        assert_eq!(id.name, "llama");
        assert_eq!(id.namespace.as_deref(), Some("llm"));
        assert_eq!(id.from, "k8s.pod.label.jobset.sigs.k8s.io/jobset-name");
        let plain = job_identity(&resource(&[("k8s.job.name", "resnet")])).unwrap();
        assert_eq!(
            (plain.name.as_str(), plain.from),
            ("resnet", "k8s.job.name")
        );
        assert_eq!(
            job_identity(&resource(&[("k8s.pod.name", "notebook")])),
            None
        );
    }

    fn report(pod: &str, job: &str, util: f64, samples: u64, energy: Option<f64>) -> Value {
        json!({
            "event.name": "gpu.run.report",
            "started_at": format!("2026-12-01T10:00:0{}.000Z", samples % 10),
            "ended_at": format!("2026-12-01T11:00:0{}.000Z", samples % 10),
            "resource": {"k8s.namespace.name": "nlp", "k8s.pod.name": pod,
                         "k8s.pod.label.training.kubeflow.org/job-name": job},
            "pod": {"samples_taken": samples, "utilization_mean": util, "busy_gpu_s": 100.0,
                    "energy_j": energy, "energy_kwh": energy.map(|e| e / 3.6e6),
                    "cost": 2.0, "idle_cost": 0.5, "idle_memory_held_gpu_h": 0.25},
            "gpus": [{}, {}],
        })
    }

    #[test]
    fn pods_add_up_per_job_and_an_absent_figure_is_no_total() {
        let reports = [
            report("bert-worker-0", "bert", 0.9, 100, Some(1000.0)),
            report("bert-worker-1", "bert", 0.3, 300, Some(3000.0)),
            report("mnist-worker-0", "mnist", 0.5, 10, None),
        ];
        let jobs = merge(&reports).unwrap();
        assert_eq!(jobs.len(), 2);
        let bert = &jobs[0];
        assert_eq!(bert["job"]["name"], "bert");
        assert_eq!(bert["pods"], 2);
        assert_eq!(bert["gpu_count"], 4);
        assert_eq!(bert["energy_j"], 4000.0);
        assert_eq!(bert["cost"], 4.0);
        assert_eq!(bert["busy_gpu_s"], 200.0);
        assert_eq!(bert["idle_memory_held_gpu_h"], 0.5);
        // (0.9 * 100 + 0.3 * 300) / 400
        assert!((bert["utilization_mean"].as_f64().unwrap() - 0.45).abs() < 1e-12);
        assert!((bert["utilization_spread"].as_f64().unwrap() - 0.6).abs() < 1e-12);
        assert_eq!(bert["workers"][0]["k8s.pod.name"], "bert-worker-1");
        assert_eq!(bert["started_at"], "2026-12-01T10:00:00.000Z");
        assert_eq!(bert["notes"], json!([]));
        let mnist = &jobs[1];
        assert_eq!(mnist["energy_j"], Value::Null);
        assert_eq!(
            mnist["notes"][0],
            "energy_j: absent in 1 of 1 pod reports, so not added up"
        );
        let mut lone = report("notebook", "x", 0.1, 1, None);
        lone["resource"] = json!({"k8s.pod.name": "notebook"});
        let (index, why) = merge(&[reports[0].clone(), lone]).unwrap_err();
        assert_eq!(index, 1);
        assert!(why.contains("names no job"), "{why}");
    }

    #[test]
    fn a_report_given_twice_counts_once_and_a_restarted_pod_is_one_pod() {
        let w0 = report("bert-worker-0", "bert", 0.9, 100, Some(1000.0));
        let w1 = report("bert-worker-1", "bert", 0.3, 300, Some(3000.0));
        let jobs = merge(&[w0.clone(), w1.clone(), w0.clone()]).unwrap();
        assert_eq!(jobs[0]["pods"], 2);
        assert_eq!(jobs[0]["energy_j"], 4000.0);
        assert_eq!(jobs[0]["workers"].as_array().unwrap().len(), 2);
        assert_eq!(
            jobs[0]["notes"],
            json!(["report 3 repeats report 1 (pod bert-worker-0, started 2026-12-01T10:00:00.000Z): counted once"])
        );
        // The same pod's second run (its sidecar restarted): another start, added up.
        let mut again = w0.clone();
        again["started_at"] = json!("2026-12-01T12:00:00.000Z");
        let jobs = merge(&[w0, w1, again]).unwrap();
        assert_eq!(jobs[0]["pods"], 2);
        assert_eq!(jobs[0]["energy_j"], 5000.0);
        assert_eq!(
            jobs[0]["notes"],
            json!(["pod bert-worker-0: 2 runs (the sidecar restarted), each added up"])
        );
    }
}
