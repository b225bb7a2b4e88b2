//! The agent's own settings and its `webhook` command's, in one table ([`SETTINGS`]): name,
//! what an unset variable means, what it accepts and what it does. The parsing reads each
//! variable through its row ([`super::Config::from_vars`],
//! [`crate::webhook::settings::WebhookSettings::from_vars`]); a bad value's error says the
//! row's `accepts`; the unknown-name check, `--help`'s list and `docs/settings.md` follow
//! the table ([`super::known`]).
//!
//! Two other tables hold the rest of the settings, each next to what it configures: the
//! alert rules' `GPU_SIDECAR_RULE_<NAME>_*` ([`crate::rules::catalogue::RULES`]) and the
//! standard `OTEL_*` variables ([`super::OTEL_VARIABLES`]); the Downward API's `K8S_*`
//! variables are [`super::DOWNWARD_API`].
//!
//! This module depends on nothing else of the crate, so that the rule table can name its
//! settings with [`PREFIX`] while the configuration reads the rule table.

/// Prefix of the agent's own variables.
pub const PREFIX: &str = "GPU_SIDECAR_";

/// What the duration settings accept (the error of a bad one says this).
pub const DURATION: &str = "a duration with a unit such as 500ms, 5s or 1m, greater than zero";

/// Which command reads a setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    /// The agent (`gpu-otel-sidecar` with no command, and `check-config`).
    Agent,
    /// The admission webhook (`gpu-otel-sidecar webhook`); it also reads the agent's
    /// logging settings and the standard `OTEL_*` export variables.
    Webhook,
}

/// What an unset (or empty) variable means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unset {
    /// This value, read as if it were set.
    Default(&'static str),
    /// No value; what that means, in words (e.g. off, or computed from other settings).
    Means(&'static str),
    /// The command that reads it stops with exit code 2, naming it.
    Required,
}

/// One setting: an environment variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// The variable, e.g. `GPU_SIDECAR_SAMPLE_INTERVAL`.
    pub name: &'static str,
    /// Which command reads it.
    pub component: Component,
    /// What an unset variable means.
    pub unset: Unset,
    /// What it accepts, in words: a bad value's error message says this.
    pub accepts: &'static str,
    /// What it does (markdown, for `docs/settings.md`).
    pub doc: &'static str,
}

impl Setting {
    /// The default value, read as if set, when the row has one.
    pub fn default_value(&self) -> Option<&'static str> {
        match self.unset {
            Unset::Default(v) => Some(v),
            Unset::Means(_) | Unset::Required => None,
        }
    }

    /// The default as `docs/settings.md` writes it: `` `5s` ``, words, or `required`.
    pub fn default_markdown(&self) -> String {
        match self.unset {
            Unset::Default(v) => format!("`{v}`"),
            Unset::Means(words) => words.to_string(),
            Unset::Required => "required".to_string(),
        }
    }
}

const fn agent(
    name: &'static str,
    unset: Unset,
    accepts: &'static str,
    doc: &'static str,
) -> Setting {
    Setting {
        name,
        component: Component::Agent,
        unset,
        accepts,
        doc,
    }
}

const fn webhook(
    name: &'static str,
    unset: Unset,
    accepts: &'static str,
    doc: &'static str,
) -> Setting {
    Setting {
        name,
        component: Component::Webhook,
        unset,
        accepts,
        doc,
    }
}

/// `GPU_SIDECAR_SAMPLE_INTERVAL`.
pub const SAMPLE_INTERVAL: Setting = agent(
    "GPU_SIDECAR_SAMPLE_INTERVAL",
    Unset::Default("5s"),
    DURATION,
    "how often NVML is read (the fast fields; see the [sampling schedule](sampling.md#sampling-schedule))",
);
/// `GPU_SIDECAR_PROCESS_INTERVAL`.
pub const PROCESS_INTERVAL: Setting = agent(
    "GPU_SIDECAR_PROCESS_INTERVAL",
    Unset::Default("10s"),
    DURATION,
    "how often per-process utilization is read (`nvmlDeviceGetProcessUtilization`, ~2 ms), and MPS clients until seen (`nvmlDeviceGetMPSComputeRunningProcesses`), at export ticks",
);
/// `GPU_SIDECAR_GPM_INTERVAL`.
pub const GPM_INTERVAL: Setting = agent(
    "GPU_SIDECAR_GPM_INTERVAL",
    Unset::Default("10s"),
    DURATION,
    "how often GPM profiling metrics are computed (~3.8 ms), at export ticks; each value is the mean over this window",
);
/// `GPU_SIDECAR_ENERGY_INTERVAL`.
pub const ENERGY_INTERVAL: Setting = agent(
    "GPU_SIDECAR_ENERGY_INTERVAL",
    Unset::Default("10s"),
    DURATION,
    "how often total energy is read (`nvmlDeviceGetTotalEnergyConsumption`, ~4 ms of CPU on an H200), at export ticks: `hw.energy` is in one export every this long",
);
/// `GPU_SIDECAR_PCIE_INTERVAL`.
pub const PCIE_INTERVAL: Setting = agent(
    "GPU_SIDECAR_PCIE_INTERVAL",
    Unset::Default("30s"),
    DURATION,
    "how often PCIe throughput is read on GPUs without GPM (`nvmlDeviceGetPcieThroughput`, blocks ~20 ms per direction), at export ticks",
);
/// `GPU_SIDECAR_METRICS_DETAIL`: the series the default export leaves out or folds.
pub const METRICS_DETAIL: Setting = agent(
    "GPU_SIDECAR_METRICS_DETAIL",
    Unset::Default("false"),
    "true or false",
    "`true`: export the detail series from the start: every clock-event reason, non-tensor pipe and per-process encoder/decoder utilization at every export (by default each appears from the first export where it is not 0), and `gpu_sidecar.sample.duration` by group of NVML calls (by default one series); see [the series budget](metrics.md#series-budget)",
);
/// `GPU_SIDECAR_DEVICES`.
pub const DEVICES: Setting = agent(
    "GPU_SIDECAR_DEVICES",
    Unset::Default("all"),
    "all, pod-resources, or a comma-separated list of NVML indices and GPU-/MIG- UUIDs such as 0,GPU-8f6c…",
    "`all`, `pod-resources` (the GPUs the kubelet allocated to this pod, NVIDIA's or GKE's device plugin; needs `K8S_POD_NAME` and `K8S_NAMESPACE_NAME`; see [Seeing the right GPUs](kubernetes.md#seeing-the-right-gpus-on-kubernetes)), or a comma list of NVML indices and GPU/MIG UUIDs (`0,GPU-8f6c…`)",
);
/// `GPU_SIDECAR_POD_RESOURCES_SOCKET`.
pub const POD_RESOURCES_SOCKET: Setting = agent(
    "GPU_SIDECAR_POD_RESOURCES_SOCKET",
    Unset::Default("/var/lib/kubelet/pod-resources/kubelet.sock"),
    "a path to the kubelet's pod-resources socket",
    "kubelet pod-resources socket, for `GPU_SIDECAR_DEVICES=pod-resources` and node mode (`gpu-otel-sidecar node`: which pods each device is allocated to)",
);
/// `GPU_SIDECAR_PROC_ROOT`, as node_exporter's `--path.procfs`.
pub const PROC_ROOT: Setting = agent(
    "GPU_SIDECAR_PROC_ROOT",
    Unset::Default("/proc"),
    "a path to a directory laid out as /proc (the host's, in the host PID namespace)",
    "where the agent reads processes: `<root>/<pid>/comm` (process names, where it shows the host PID namespace), `<root>/<pid>/cgroup` (node mode: each GPU process's pod) and `<root>/driver/nvidia/gpus/` (node mode: GKE's device ids); as node_exporter's `--path.procfs`",
);
/// `GPU_SIDECAR_EXIT_WITH_PROCESS`.
pub const EXIT_WITH_PROCESS: Setting = agent(
    "GPU_SIDECAR_EXIT_WITH_PROCESS",
    Unset::Means("unset"),
    "a process name as in /proc/<pid>/comm (at most 15 characters, no '/'), e.g. python",
    "a process name (`/proc/<pid>/comm`, e.g. `python`): once seen and then gone, the agent shuts down as on SIGTERM (classic sidecars with `shareProcessNamespace`)",
);
/// `GPU_SIDECAR_EXIT_WITH_CONTAINERS`.
pub const EXIT_WITH_CONTAINERS: Setting = agent(
    "GPU_SIDECAR_EXIT_WITH_CONTAINERS",
    Unset::Default("false"),
    "true or false",
    "`true`: once no process of the pod's other containers is left (the pod's process namespace shared, `shareProcessNamespace`; the infra container's `pause` and the agent's own container aside), whatever the trainer runs (`python3`, `torchrun`, a shell script), the agent shuts down as on SIGTERM, at once if they ended before it started; a classic sidecar's Job then completes (see [Kubernetes](kubernetes.md#classic-sidecars-that-end-with-the-trainer)). Not with `GPU_SIDECAR_EXIT_WITH_PROCESS`",
);
/// `GPU_SIDECAR_POD_RESTART_POLICY`: the pod's `restartPolicy`, for the exit rules.
pub const POD_RESTART_POLICY: Setting = agent(
    "GPU_SIDECAR_POD_RESTART_POLICY",
    Unset::Means("as `Never`"),
    "Never, OnFailure or Always (the pod's restartPolicy)",
    "the pod's `restartPolicy` (the webhook and the chart's `classic.restartPolicy` set it; the Downward API cannot), for the exit rules of a classic sidecar (`GPU_SIDECAR_EXIT_WITH_CONTAINERS`, `GPU_SIDECAR_EXIT_WITH_PROCESS`): `Never`, the agent ends as soon as the trainer has ended; `OnFailure`, only once it has stayed gone longer than the kubelet would wait to restart it (`GPU_SIDECAR_RESTART_WAIT`), so that a failed trainer restarted in place finds the sidecar still there; `Always`, never by itself (an exit rule with it is refused: the kubelet would restart the sidecar, which would end again at once). See [Kubernetes](kubernetes.md#classic-sidecars-and-the-pods-restart-policy)",
);
/// `GPU_SIDECAR_RESTART_WAIT`: with `OnFailure`, how long the trainer must stay gone.
pub const RESTART_WAIT: Setting = agent(
    "GPU_SIDECAR_RESTART_WAIT",
    Unset::Default("kubelet"),
    "kubelet, or a duration with a unit such as 500ms, 5s or 1m, greater than zero",
    "with `GPU_SIDECAR_POD_RESTART_POLICY=OnFailure`, how long the pod's other containers (or the followed process) must stay gone before the agent ends: `kubelet`, the kubelet's crash-loop back-off for the restarts seen so far (10 s, doubling with each restart to 5 min, back to 10 s after 10 minutes of running) plus 20 s for the kubelet to notice and start the container; or a fixed duration (nodes whose kubelets set a shorter `crashLoopBackOff.maxContainerRestartPeriod`)",
);
/// `GPU_SIDECAR_NVML_LIBRARY`.
pub const NVML_LIBRARY: Setting = agent(
    "GPU_SIDECAR_NVML_LIBRARY",
    Unset::Default("libnvidia-ml.so.1"),
    "a path or soname of the NVML library",
    "path or soname of the NVML library to load",
);
/// `GPU_SIDECAR_LOG_FORMAT`.
pub const LOG_FORMAT: Setting = agent(
    "GPU_SIDECAR_LOG_FORMAT",
    Unset::Default("text"),
    "text or json",
    "`text` or `json` (the agent's own logs, on stderr)",
);
/// `GPU_SIDECAR_LOG_LEVEL`.
pub const LOG_LEVEL: Setting = agent(
    "GPU_SIDECAR_LOG_LEVEL",
    Unset::Default("info"),
    "a level (error, warn, info, debug, trace) or tracing filter directives such as info,gpu_otel_sidecar=debug",
    "`error`, `warn`, `info`, `debug`, `trace`, or directives such as `info,gpu_otel_sidecar=debug`",
);
/// `GPU_SIDECAR_SHUTDOWN_TIMEOUT`.
pub const SHUTDOWN_TIMEOUT: Setting = agent(
    "GPU_SIDECAR_SHUTDOWN_TIMEOUT",
    Unset::Default("5s"),
    DURATION,
    "bound on the final sample and export after SIGTERM/SIGINT",
);
/// `GPU_SIDECAR_REPORT_FILE`.
pub const REPORT_FILE: Setting = agent(
    "GPU_SIDECAR_REPORT_FILE",
    Unset::Means("none"),
    "a path, or - for standard output",
    "where the run report goes besides the `gpu.run.report` event: a path (replaced at each shutdown) or `-` for one JSON line on stdout (see [the run report](run-report.md))",
);
/// `GPU_SIDECAR_REPORT_HTML`.
pub const REPORT_HTML: Setting = agent(
    "GPU_SIDECAR_REPORT_HTML",
    Unset::Means("none"),
    "a file path (not -)",
    "at shutdown, also write the run report as one self-contained HTML page to this path (replaced): every GPU's curves from all the samples taken, the summary, the events (see [the page](run-report.md#the-page)); the curves take about 100 KiB of memory per GPU, whatever the run's length",
);
/// `GPU_SIDECAR_PRICE_PER_GPU_HOUR`.
pub const PRICE_PER_GPU_HOUR: Setting = agent(
    "GPU_SIDECAR_PRICE_PER_GPU_HOUR",
    Unset::Means("none"),
    "a price per GPU-hour: a number from 0, in any currency, e.g. 2.50",
    "price of one GPU-hour (any currency, e.g. `2.50`): the run report's `cost` and `idle_cost`",
);
/// `GPU_SIDECAR_POD_LABELS`: which pod labels go on the resource (`super::job`).
pub const POD_LABELS: Setting = agent(
    "GPU_SIDECAR_POD_LABELS",
    Unset::Default("training.kubeflow.org/job-name,training.kubeflow.org/replica-type,training.kubeflow.org/replica-index,training.kubeflow.org/job-role,jobset.sigs.k8s.io/jobset-name,jobset.sigs.k8s.io/replicatedjob-name,jobset.sigs.k8s.io/job-index,batch.kubernetes.io/job-completion-index,volcano.sh/job-name,leaderworkerset.sigs.k8s.io/name,leaderworkerset.sigs.k8s.io/group-index,leaderworkerset.sigs.k8s.io/worker-index"),
    "a comma-separated list of Kubernetes label keys such as training.kubeflow.org/job-name,team, or none",
    "the pod labels put on the resource as `k8s.pod.label.<key>`, each read from the variable `K8S_POD_LABEL_<KEY>` (the key in capitals, `_` for every other character), which the chart and the webhook fill from the pod (Downward API); an empty one (a label the pod lacks) is left out. `k8s.job.name` is read besides (`batch.kubernetes.io/job-name`, or `job-name` with `controller-uid`). The default covers Kubeflow's training operator, the MPI operator, JobSet, Volcano and LeaderWorkerSet; the chart's `podLabels` sets both the list and the variables (see [Jobs](kubernetes.md#jobs))",
);
/// `GPU_SIDECAR_SAMPLE_LOG`.
pub const SAMPLE_LOG: Setting = agent(
    "GPU_SIDECAR_SAMPLE_LOG",
    Unset::Means("none (off)"),
    "a path, or - for standard output",
    "a path, or `-` for stdout: one row per GPU per sample (see [the sample log](run-report.md#sample-log))",
);
/// `GPU_SIDECAR_SAMPLE_LOG_FORMAT`.
pub const SAMPLE_LOG_FORMAT: Setting = agent(
    "GPU_SIDECAR_SAMPLE_LOG_FORMAT",
    Unset::Default("csv"),
    "csv or jsonl",
    "`csv` (header line, RFC 4180) or `jsonl` (one JSON object per line)",
);
/// `GPU_SIDECAR_SAMPLE_LOG_MAX_BYTES`.
pub const SAMPLE_LOG_MAX_BYTES: Setting = agent(
    "GPU_SIDECAR_SAMPLE_LOG_MAX_BYTES",
    Unset::Default("100MiB"),
    "a size greater than zero in bytes, or with a unit such as 512KiB, 100MiB or 1GB",
    "a file is renamed to `<path>.1` (replacing the previous one) before it would grow past this; bytes, or with a unit (`512KiB`, `100MiB`, `1GB`)",
);
/// `GPU_SIDECAR_HEALTH_ADDR`: every interface by default (kubelet probes come from the
/// node), a port next to the Collector's health port 13133.
pub const HEALTH_ADDR: Setting = agent(
    "GPU_SIDECAR_HEALTH_ADDR",
    Unset::Default("0.0.0.0:13134"),
    "an IP address and port such as 0.0.0.0:13134, unix: and an absolute path of at most 107 bytes such as unix:/run/gpu-otel-sidecar/health.sock, or off",
    "address of the health endpoint (`/healthz`, `/readyz`): an IP address and port, `unix:<path>` for a Unix socket (no port: what the chart gives `hostNetwork` pods, probed with `gpu-otel-sidecar health`), or `off`",
);
/// `GPU_SIDECAR_WATCHDOG_TIMEOUT`.
pub const WATCHDOG_TIMEOUT: Setting = agent(
    "GPU_SIDECAR_WATCHDOG_TIMEOUT",
    Unset::Means("three sample intervals, at least `10s`"),
    DURATION,
    "an NVML step (init, listing, tick; for the event watcher, a wait beyond its own timeout) running longer is reported stuck: logged once, counted, not ready",
);

/// `GPU_SIDECAR_WEBHOOK_ADDR`: where the webhook's HTTPS server listens.
pub const WEBHOOK_ADDR: Setting = webhook(
    "GPU_SIDECAR_WEBHOOK_ADDR",
    Unset::Default("0.0.0.0:8443"),
    "an IP address and port such as 0.0.0.0:8443",
    "address of the HTTPS server: `POST /mutate` (pods annotated `gpu-otel-sidecar.io/inject: \"true\"`), `POST /mutate/namespace` (pods of labelled namespaces), `GET /healthz`, `GET /readyz`",
);
/// `GPU_SIDECAR_WEBHOOK_TLS_CERT`: the serving certificate chain.
pub const WEBHOOK_TLS_CERT: Setting = webhook(
    "GPU_SIDECAR_WEBHOOK_TLS_CERT",
    Unset::Means("required, unless `GPU_SIDECAR_WEBHOOK_TLS_SECRET` is set"),
    "a readable PEM file with the serving certificate first, then its chain",
    "PEM file of the serving certificate (then its chain); re-read when it changes: a renewed certificate is served from the next TLS handshake on, without a restart",
);
/// `GPU_SIDECAR_WEBHOOK_TLS_KEY`: the serving certificate's private key.
pub const WEBHOOK_TLS_KEY: Setting = webhook(
    "GPU_SIDECAR_WEBHOOK_TLS_KEY",
    Unset::Means("required, unless `GPU_SIDECAR_WEBHOOK_TLS_SECRET` is set"),
    "a readable PEM file with one private key (PKCS#8, PKCS#1 or SEC1) matching the certificate",
    "PEM file of its private key (PKCS#8, PKCS#1 or SEC1); re-read with it (a pair that does not match is logged and the previous one served)",
);
/// `GPU_SIDECAR_WEBHOOK_TLS_SECRET`: the Secret the webhook keeps its own CA and certificate in.
pub const WEBHOOK_TLS_SECRET: Setting = webhook(
    "GPU_SIDECAR_WEBHOOK_TLS_SECRET",
    Unset::Means("unset (the files of `GPU_SIDECAR_WEBHOOK_TLS_CERT` and `_KEY`)"),
    "a Secret name (lower-case letters, digits, '-' and '.')",
    "a Secret of the webhook's own namespace where it keeps its CA and serving certificate: made once by the first replica if it does not exist (for the Service of `GPU_SIDECAR_WEBHOOK_CONFIGURATION`), then served by every replica, re-read every `GPU_SIDECAR_WEBHOOK_SECRET_POLL_INTERVAL`; renewed by one replica at two thirds of `GPU_SIDECAR_WEBHOOK_CERT_VALIDITY` (or when deleted, or found expired), with the old and new CAs both in the `caBundle` around the switch (`GPU_SIDECAR_WEBHOOK_ROTATION_OVERLAP`); the CAs are written into that configuration's `caBundle` by the webhook, so rendered manifests carry no key material and every `helm template` renders the same (Argo CD, Flux). Talks to the API server with the pod's service account (`KUBERNETES_SERVICE_HOST`, `_PORT`). See [Kubernetes](kubernetes.md#the-webhooks-certificate-over-time)",
);
/// `GPU_SIDECAR_WEBHOOK_CONFIGURATION`: whose `caBundle` the webhook keeps.
pub const WEBHOOK_CONFIGURATION: Setting = webhook(
    "GPU_SIDECAR_WEBHOOK_CONFIGURATION",
    Unset::Means("required with `GPU_SIDECAR_WEBHOOK_TLS_SECRET`"),
    "a MutatingWebhookConfiguration name",
    "the `MutatingWebhookConfiguration` whose entries' `caBundle` the webhook sets to the CA of `GPU_SIDECAR_WEBHOOK_TLS_SECRET` (again whenever it differs, as after a `kubectl replace`); its Service reference names the certificate's DNS names",
);
/// `GPU_SIDECAR_WEBHOOK_SERVICE_ACCOUNT_DIR`: the service account's token, CA and namespace.
pub const WEBHOOK_SERVICE_ACCOUNT_DIR: Setting = webhook(
    "GPU_SIDECAR_WEBHOOK_SERVICE_ACCOUNT_DIR",
    Unset::Default("/var/run/secrets/kubernetes.io/serviceaccount"),
    "a directory holding token, ca.crt and namespace",
    "the pod's service account files (`token`, re-read at each request as the kubelet rotates it; `ca.crt`, the API server's CA; `namespace`), with `GPU_SIDECAR_WEBHOOK_TLS_SECRET`",
);
/// `GPU_SIDECAR_WEBHOOK_CERT_VALIDITY`: how long a certificate the webhook makes is valid.
pub const WEBHOOK_CERT_VALIDITY: Setting = webhook(
    "GPU_SIDECAR_WEBHOOK_CERT_VALIDITY",
    Unset::Default("3650d"),
    DURATION,
    "validity of the CA and serving certificate the webhook makes (`GPU_SIDECAR_WEBHOOK_TLS_SECRET`); it renews them at two thirds of it, with the overlap of `GPU_SIDECAR_WEBHOOK_ROTATION_OVERLAP` (at least three times that, and ending before the year 10000)",
);
/// `GPU_SIDECAR_WEBHOOK_RESYNC_INTERVAL`: how often the Secret and the configuration are read.
pub const WEBHOOK_RESYNC_INTERVAL: Setting = webhook(
    "GPU_SIDECAR_WEBHOOK_RESYNC_INTERVAL",
    Unset::Default("1m"),
    DURATION,
    "how often the webhook reads the configuration's `caBundle` (set again when it differs from its Secret's CAs, as after a `kubectl replace`), with `GPU_SIDECAR_WEBHOOK_TLS_SECRET`; the Secret itself is read every `GPU_SIDECAR_WEBHOOK_SECRET_POLL_INTERVAL`, and a change of it sets the `caBundle` at once",
);
/// `GPU_SIDECAR_WEBHOOK_SECRET_POLL_INTERVAL`: how often each replica reads its Secret.
pub const WEBHOOK_SECRET_POLL_INTERVAL: Setting = webhook(
    "GPU_SIDECAR_WEBHOOK_SECRET_POLL_INTERVAL",
    Unset::Default("2s"),
    DURATION,
    "how often each replica reads its Secret (`GPU_SIDECAR_WEBHOOK_TLS_SECRET`: one small `GET`): a renewed certificate, a deleted Secret or a step of a rotation is noticed within this long; after a failure it tries again after this long, doubling up to `GPU_SIDECAR_WEBHOOK_RESYNC_INTERVAL` (at most 1 m)",
);
/// `GPU_SIDECAR_WEBHOOK_ROTATION_OVERLAP`: how long the caBundle carries both CAs on each side
/// of a rotation.
pub const WEBHOOK_ROTATION_OVERLAP: Setting = webhook(
    "GPU_SIDECAR_WEBHOOK_ROTATION_OVERLAP",
    Unset::Default("30s"),
    "a duration with a unit such as 30s or 1m, at least twice GPU_SIDECAR_WEBHOOK_SECRET_POLL_INTERVAL",
    "a rotation of the certificate the webhook keeps (renewal, a deleted Secret) first puts the new CA into the `caBundle` beside the old one, serves the new certificate only this long after (every replica has read it and every API server has taken the `caBundle` by then; a replica that has not seen its CA in the configuration waits), and drops the old CA this long after that: no handshake fails at any replica during a rotation. At least twice the Secret poll interval; `GPU_SIDECAR_WEBHOOK_CERT_VALIDITY` must be at least three times this (a renewal at two thirds of the validity completes before the old certificate expires)",
);
/// `GPU_SIDECAR_WEBHOOK_SIDECAR`: what is injected, as the chart renders it.
pub const WEBHOOK_SIDECAR: Setting = webhook(
    "GPU_SIDECAR_WEBHOOK_SIDECAR",
    Unset::Required,
    "a readable JSON file as the Helm chart renders it (`sidecar.json` of the webhook's ConfigMap)",
    "JSON file of the sidecar to inject, as the chart renders it from its values with its named templates (`sidecar.json` of the webhook's ConfigMap): its container, pod fields and volumes (image, collector, `mode`, `gpuVisibility`); read at start",
);
/// `GPU_SIDECAR_WEBHOOK_SHUTDOWN_DELAY`: how long the server goes on answering after SIGTERM.
pub const WEBHOOK_SHUTDOWN_DELAY: Setting = webhook(
    "GPU_SIDECAR_WEBHOOK_SHUTDOWN_DELAY",
    Unset::Default("5s"),
    DURATION,
    "after SIGTERM it goes on answering this long (`/readyz` says 503) while Kubernetes takes it out of its Service, then finishes the requests in flight (5 s at most) and exits 0",
);
/// `GPU_SIDECAR_WEBHOOK_REINVOCATION_POLICY`: whether a call may be followed by another.
pub const WEBHOOK_REINVOCATION_POLICY: Setting = webhook(
    "GPU_SIDECAR_WEBHOOK_REINVOCATION_POLICY",
    Unset::Default("IfNeeded"),
    "IfNeeded or Never (the webhook entries' reinvocationPolicy)",
    "the `reinvocationPolicy` of the webhook's entries (the chart passes `webhook.reinvocationPolicy`): with `IfNeeded` a pod left without the sidecar gets no `kubectl` warning, since a later webhook's change calls the webhook again and may still get it injected; with `Never` a pod that asked for the sidecar is warned (not a pod without GPUs that only its namespace label asked for). The reason is logged and counted either way",
);

/// Every setting of the agent and of the webhook command, in `docs/settings.md`'s order.
pub static SETTINGS: &[Setting] = &[
    SAMPLE_INTERVAL,
    PROCESS_INTERVAL,
    GPM_INTERVAL,
    ENERGY_INTERVAL,
    PCIE_INTERVAL,
    METRICS_DETAIL,
    DEVICES,
    POD_RESOURCES_SOCKET,
    PROC_ROOT,
    EXIT_WITH_PROCESS,
    EXIT_WITH_CONTAINERS,
    POD_RESTART_POLICY,
    RESTART_WAIT,
    NVML_LIBRARY,
    LOG_FORMAT,
    LOG_LEVEL,
    SHUTDOWN_TIMEOUT,
    REPORT_FILE,
    REPORT_HTML,
    PRICE_PER_GPU_HOUR,
    POD_LABELS,
    SAMPLE_LOG,
    SAMPLE_LOG_FORMAT,
    SAMPLE_LOG_MAX_BYTES,
    HEALTH_ADDR,
    WATCHDOG_TIMEOUT,
    WEBHOOK_ADDR,
    WEBHOOK_TLS_CERT,
    WEBHOOK_TLS_KEY,
    WEBHOOK_TLS_SECRET,
    WEBHOOK_CONFIGURATION,
    WEBHOOK_SERVICE_ACCOUNT_DIR,
    WEBHOOK_CERT_VALIDITY,
    WEBHOOK_RESYNC_INTERVAL,
    WEBHOOK_SECRET_POLL_INTERVAL,
    WEBHOOK_ROTATION_OVERLAP,
    WEBHOOK_SIDECAR,
    WEBHOOK_SHUTDOWN_DELAY,
    WEBHOOK_REINVOCATION_POLICY,
];
