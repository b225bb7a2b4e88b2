//! `gpu-otel-sidecar`: the agent binary: arguments, subcommands and exit codes. The agent
//! itself (the data flow, started and stopped in one place) is [`gpu_otel_sidecar::agent`].
//! See the README for settings.
//!
//! Exit codes: 0 after a clean shutdown (SIGTERM/SIGINT), 2 for a bad setting or argument
//! (one line on stderr naming the variable), 1 if the exporter cannot be set up or the
//! health port cannot be bound.
//!
//! `gpu-otel-sidecar node` runs the same agent as the one agent of a node (every GPU, each
//! pod's share: [`gpu_otel_sidecar::attribution::node`]).
//!
//! `gpu-otel-sidecar health` asks the local agent's `/readyz` (`--liveness`: `/healthz`) at
//! `GPU_SIDECAR_HEALTH_ADDR`, a TCP address or a Unix socket (for a Docker `HEALTHCHECK` in
//! an image without curl, and the `exec` probes of a `hostNetwork` pod's sidecar): exit 0
//! when it answers 200, 1 otherwise.
//!
//! `gpu-otel-sidecar webhook` serves the admission webhook ([`gpu_otel_sidecar::webhook`]).
//!
//! `gpu-otel-sidecar report`, `compare` and `merge` read run reports back: the HTML page, a
//! regression check between two runs, and a job's report from its pods'
//! ([`gpu_otel_sidecar::report::cli`]).
//!
//! `gpu-otel-sidecar check-config` reads the settings as the agent would and prints what it
//! understood (one JSON object), without loading NVML or connecting anywhere: exit 0, or 2
//! with the line the agent would print for a bad setting.

use std::process::ExitCode;
use std::time::Duration;

use gpu_otel_sidecar::config::{Config, LogFormat};
use gpu_otel_sidecar::{agent, attribution, logging, probes, report};

const USAGE: &str = "\
gpu-otel-sidecar: reads NVIDIA GPUs through NVML and pushes OpenTelemetry metrics and events
over OTLP.

Usage: gpu-otel-sidecar           run the agent until SIGTERM or SIGINT
       gpu-otel-sidecar node      run it as the one agent of a node (a DaemonSet with hostPID):
                                  every GPU on the node's resource, each pod's share of each
                                  device on the pod's (docs/kubernetes.md, One agent per node)
       gpu-otel-sidecar health [--liveness]
                                  ask the running agent's /readyz (--liveness: /healthz) at
                                  GPU_SIDECAR_HEALTH_ADDR (an address or unix:<path>);
                                  exit 0 if it answers 200, 1 if not
       gpu-otel-sidecar webhook   serve the admission webhook that injects the sidecar into
                                  GPU pods (GPU_SIDECAR_WEBHOOK_*; installed by the Helm chart)
       gpu-otel-sidecar check-config
                                  read the settings from the environment as the agent
                                  would and print what it understood as one JSON object
                                  (resource attributes decoded); exit 0, or 2 naming the
                                  bad setting. Loads no NVML, connects nowhere.
       gpu-otel-sidecar report REPORT.json [--samples SAMPLE_LOG]... --html OUT.html
                                  the run report as one self-contained HTML page
       gpu-otel-sidecar compare BASE.json NEW.json [--max-regression PCT] [--max-missed PCT]
                                  [--min-wall-time PCT] [--json]
                                  first whether NEW is a whole run, then the figures of two
                                  runs side by side; exit 1 when one got worse by more than
                                  PCT (default 10), 2 for bad input; when NEW is not whole,
                                  the sum of: 4 a GPU lost or fewer GPUs, 8 samples missed
                                  (over --max-missed, default 1 %), 16 XIDs or uncorrected
                                  ECC errors, 32 events dropped, 64 shorter than
                                  --min-wall-time (default 50 %) of BASE
       gpu-otel-sidecar merge REPORT.json...
                                  add up the run reports of a job's pods: one job report
                                  (gpu.job.report) per job, one JSON line each
       gpu-otel-sidecar --help | --version

Exit codes: 0 stopped cleanly; 1 could not start (OTLP exporter set-up, health port in use);
            2 a bad setting or argument (named on stderr). `health`: 0 ready, 1 not.";

/// `--help`: the usage, then every setting's name and where their defaults are written.
fn help() -> String {
    format!(
        "{USAGE}\n\nSettings are environment variables; each one's default and what it accepts are in\n\
         docs/settings.md (in the source repository, generated from the same tables as this list):\n{}",
        gpu_otel_sidecar::config::known::settings_help()
    )
}

fn main() -> ExitCode {
    let node = match std::env::args().nth(1).as_deref() {
        None => false,
        Some("node") => true,
        Some("health") => return health_command(),
        Some("webhook") => return gpu_otel_sidecar::webhook::command(),
        Some("check-config") => return check_config_command(),
        Some("report") => return report::cli::report_command(std::env::args_os().skip(2)),
        Some("compare") => return report::cli::compare_command(std::env::args_os().skip(2)),
        Some("merge") => return report::cli::merge_command(std::env::args_os().skip(2)),
        Some("--help" | "-h") => {
            print!("{}", help());
            return ExitCode::SUCCESS;
        }
        Some("--version" | "-V") => {
            println!("gpu-otel-sidecar {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Some(other) => {
            eprintln!("gpu-otel-sidecar: unknown argument {other:?}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let (config, dropped) = match Config::from_env().and_then(|c| match node {
        true => c.into_node(),
        false => Ok((c, Vec::new())),
    }) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gpu-otel-sidecar: {e}");
            return ExitCode::from(2);
        }
    };
    logging::init(&config.log_level, config.log_format == LogFormat::Json);
    if !dropped.is_empty() {
        tracing::warn!(attributes = %dropped.join(", "), "node mode: these resource attributes name one pod and are left out of the node's resource (each pod's share carries its own)");
    }
    match agent::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// `gpu-otel-sidecar check-config`: the settings as the agent understands them, as one JSON
/// object on stdout (header values never shown); exit 2 with the agent's own message for a
/// bad setting.
fn check_config_command() -> ExitCode {
    let config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gpu-otel-sidecar: {e}");
            return ExitCode::from(2);
        }
    };
    let resource = attribution::resource(&config);
    println!("{}", gpu_otel_sidecar::config::summary(&config, &resource));
    ExitCode::SUCCESS
}

/// `gpu-otel-sidecar health [--liveness]`: prints the `/readyz` (or `/healthz`) body; exit 0
/// when it answers 200.
fn health_command() -> ExitCode {
    let path = match std::env::args().nth(2).as_deref() {
        None => "/readyz",
        Some("--liveness") => "/healthz",
        Some(other) => {
            eprintln!("gpu-otel-sidecar health: unknown argument {other:?} (expected --liveness or nothing)");
            return ExitCode::from(2);
        }
    };
    let config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gpu-otel-sidecar: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(addr) = config.health_addr else {
        eprintln!(
            "gpu-otel-sidecar health: the health endpoint is off (GPU_SIDECAR_HEALTH_ADDR=off)"
        );
        return ExitCode::FAILURE;
    };
    match probes::probe(&addr, path, Duration::from_secs(3)) {
        Ok((status, body)) => {
            println!("{body}");
            if status == 200 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("gpu-otel-sidecar health: {e}");
            ExitCode::FAILURE
        }
    }
}
