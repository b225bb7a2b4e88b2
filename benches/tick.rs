//! The agent's own work per tick, in process, with the mock NVML library: sampling 1, 8 and
//! 56 devices through the real NVML code path ([`sampling::with_session`]), mapping a
//! snapshot to data points ([`catalogue::device_points`] over [`CATALOGUE`]), and one export:
//! building the `ExportMetricsServiceRequest` from the snapshot ([`Encoder::encode`]: the
//! mapping, the series' start times, the agent's own metrics) and its protobuf encoding, what
//! OTLP sends.
//!
//! ```sh
//! cargo build --release -p nvml-mock           # target/release/libnvml_mock.so
//! cargo bench --bench tick                     # all; add a filter: cargo bench --bench tick -- sample
//! ```
//!
//! divan reports time per tick and, through its counting allocator ([`AllocProfiler`]),
//! allocations per tick (`alloc`/`dealloc`/`grow` rows) made by this process's Rust code
//! (the agent, nvml-wrapper; not the mock library's own, as it has its own
//! allocator, nor NVML's in real life). The `item/s` throughput counts devices, so
//! ns per device per tick = time / devices. Before the benches, one line per setup says how
//! many devices a tick really sampled and how many bytes one export encodes to.
//!
//! `rules_1s` and `rules_100ms` time the rules (`Engine::observe`, every rule at its default)
//! on the 64 devices of `bench-8gpu-mig7.json` (8 GPUs and their 56 MIG devices) at a given
//! run length: the engine is fed that many minutes of ticks outside the timing, then one more
//! minute is timed (60 ticks at 1 s, 600 at 100 ms); time per tick = time / ticks. Every
//! device carries a GPM window ending every 10 s, so the profiling rules judge too. Read
//! together, the rows are the rules' cost per tick against the run's length. These are wall
//! times; on a shared machine another process's load inflates them. With
//! `GPU_OTEL_SIDECAR_BENCH_RULES_CURVE=1` the bench instead prints the same curve in this thread's
//! CPU time (`CLOCK_THREAD_CPUTIME_ID`, which waiting for a core does not count), one line
//! per minute of one run: 64 devices at 1 s for 30 minutes, then at 100 ms for 10 minutes.
//!
//! `node_*` time node mode (`gpu-otel-sidecar node`) on the same devices: `node_sample` a
//! tick with the MPS clients listed too (every tick in node mode), `node_attribute` the pod
//! attribution added to each snapshot on the sampler thread (each process's pod from a
//! made-up proc root, cached after the first tick; the kubelet's allocations; the shares),
//! with every GPU time-sliced among 4 pods (8 GPUs: 32 pods) or every MIG device between 2
//! (56 MIG devices: 112 pods), and `node_export_total` one export with a resource per pod.
//!
//! Mock library: `$NVML_MOCK_LIB`, else `target/release/libnvml_mock.so` (built if missing).
//! Scenarios:
//! `tests/scenarios/bench-8gpu.json` (1 device = its GPU 0, 8 = all) and
//! `bench-8gpu-mig7.json` (8 GPUs × 7 MIG instances). Each setup loads its own copy of the
//! library (the mock's state, scenario included, is per loaded copy). `sample_*` benches run
//! with `NVML_MOCK_NO_LATENCY=1`; `sample_with_h200_latency` keeps the recorded H200 latency
//! of the slow calls (`nvmlDeviceGetTotalEnergyConsumption` 3.2 ms per GPU), slept in the
//! calling thread as the real driver blocks it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use divan::counter::ItemsCount;
use divan::{AllocProfiler, Bencher};
use gpu_otel_sidecar::attribution;
use gpu_otel_sidecar::attribution::node::kubelet::{Allocation, KubeletView};
use gpu_otel_sidecar::attribution::node::NodeAttribution;
use gpu_otel_sidecar::catalogue::metrics::{device_points, CATALOGUE};
use gpu_otel_sidecar::config::{Config, DeviceId, DeviceSelection};
use gpu_otel_sidecar::rules::Engine;
use gpu_otel_sidecar::sampling::{
    self, Annotate, DeviceInfo, DeviceSample, GpmMetrics, ProcessSample, ProcessUtilization,
    SamplerSettings, Snapshot,
};
use gpu_otel_sidecar::telemetry::metrics::encode::Encoder;
use gpu_otel_sidecar::telemetry::metrics::recorded::Recorded;
use gpu_otel_sidecar::telemetry::metrics::self_metrics::OwnValues;
use gpu_otel_sidecar::telemetry::metrics::series::Stamp;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use prost::Message as _;

#[global_allocator]
static ALLOC: AllocProfiler = AllocProfiler::system();

/// Devices per tick: one GPU, an 8-GPU node, 8 GPUs × 7 MIG instances.
const DEVICES: &[usize] = &[1, 8, 56];

fn main() {
    if std::env::var_os("GPU_OTEL_SIDECAR_BENCH_RULES_CURVE").is_some() {
        rules_curve();
        return;
    }
    for &n in DEVICES {
        for latency in [false, true] {
            let settings = setup(n, latency);
            let sampled = sampling::with_session(&settings, |sample| sample().len())
                .unwrap_or_else(|e| panic!("NVML init through the mock failed: {e}"));
            println!(
                "setup {n:>2} devices{}: {sampled} devices sampled per tick{}",
                if latency { " (H200 latency)" } else { "" },
                if sampled < n {
                    " (the agent samples physical GPUs only: MIG devices are not sampled yet)"
                } else {
                    ""
                }
            );
        }
        let p = ExportPipeline::new(snapshot(n));
        let bytes = p.encode(&p.build()).len();
        println!("setup {n:>2} devices: one export encodes to {bytes} bytes of protobuf");
    }
    for &n in NODE_DEVICES {
        let mut node = NodeFixture::new(n);
        let p = ExportPipeline::node(node.annotated());
        let request = p.build();
        let bytes = p.encode(&request).len();
        println!(
            "setup node {n:>2}: {} devices, {} pods, one export encodes to {bytes} bytes in {} resources",
            node.snapshot.devices.len(),
            node.pods,
            request.resource_metrics.len()
        );
    }
    divan::main();
    // The copies stay mapped until exit; unlinking them now is fine.
    let _ = std::fs::remove_dir_all(copies_dir());
}

/// Where the per-setup copies of the mock library go.
fn copies_dir() -> PathBuf {
    std::env::temp_dir().join(format!("gpu-otel-sidecar-bench-{}", std::process::id()))
}

/// One tick through the real NVML code path, no latency in the mock: the agent's own cost
/// plus the mock's (a table look-up per call; the real library costs far more, see
/// docs/benchmarks.md).
#[divan::bench(args = DEVICES)]
fn sample(bencher: Bencher, devices: usize) {
    bench_sampling(bencher, &setup(devices, false));
}

/// One tick with the recorded H200 latency of the slow calls, slept inside the mock: what a
/// tick takes on the real driver (wall time; the sleep costs no CPU).
#[divan::bench(args = DEVICES, sample_count = 20)]
fn sample_with_h200_latency(bencher: Bencher, devices: usize) {
    bench_sampling(bencher, &setup(devices, true));
}

fn bench_sampling(bencher: Bencher, settings: &SamplerSettings) {
    sampling::with_session(settings, |sample| {
        let n = sample().len();
        bencher
            .counter(ItemsCount::new(n))
            .bench_local(|| sample().len());
    })
    .unwrap_or_else(|e| panic!("NVML init through the mock failed: {e}"));
}

/// Mapping one snapshot to data points: every catalogue row for every device (what each
/// export does first), points dropped inside the timing.
#[divan::bench(args = DEVICES)]
fn map(bencher: Bencher, devices: usize) {
    let snap = snapshot(devices);
    bencher
        .counter(ItemsCount::new(snap.devices.len()))
        .bench_local(|| {
            let mut points = 0;
            for d in &snap.devices {
                for def in CATALOGUE {
                    points += device_points(def, d).len();
                }
            }
            points
        });
}

/// Building one export's request: the mapping, each series' start time and state, the
/// agent's own metrics, into an `ExportMetricsServiceRequest`.
#[divan::bench(args = DEVICES)]
fn export_build(bencher: Bencher, devices: usize) {
    let p = ExportPipeline::new(snapshot(devices));
    bencher
        .counter(ItemsCount::new(p.snapshot.devices.len()))
        .bench_local(|| p.build());
}

/// The OTLP protobuf encoding of one request: `prost::Message::encode_to_vec` (what the
/// gRPC and HTTP transports send, before gzip).
#[divan::bench(args = DEVICES)]
fn export_encode(bencher: Bencher, devices: usize) {
    let p = ExportPipeline::new(snapshot(devices));
    let request = p.build();
    bencher
        .counter(ItemsCount::new(p.snapshot.devices.len()))
        .bench_local(|| p.encode(&request).len());
}

/// Building and encoding together: one export's CPU work in the agent, short of the
/// network.
#[divan::bench(args = DEVICES)]
fn export_total(bencher: Bencher, devices: usize) {
    let p = ExportPipeline::new(snapshot(devices));
    bencher
        .counter(ItemsCount::new(p.snapshot.devices.len()))
        .bench_local(|| p.encode(&p.build()).len());
}

/// Node mode: 8 GPUs, or the 8 GPUs in MIG mode with their 56 MIG devices.
const NODE_DEVICES: &[usize] = &[8, 56];

/// One node-mode tick through the real NVML code path: as `sample`, with the MPS clients
/// listed at every tick (`nvmlDeviceGetMPSComputeRunningProcesses_v3`).
#[divan::bench(args = NODE_DEVICES)]
fn node_sample(bencher: Bencher, devices: usize) {
    let mut settings = setup(devices, false);
    settings.mps_clients = true;
    bench_sampling(bencher, &settings);
}

/// The pod attribution of one snapshot (after the first: each process's cgroup file is
/// read once), on the sampler thread.
#[divan::bench(args = NODE_DEVICES)]
fn node_attribute(bencher: Bencher, devices: usize) {
    let mut node = NodeFixture::new(devices);
    let _ = node.annotated();
    let base = node.snapshot.clone();
    bencher
        .counter(ItemsCount::new(base.devices.len()))
        .with_inputs(|| base.clone())
        .bench_local_values(|mut s| {
            node.attribution.annotate(&mut s, true);
            s
        });
}

/// One node-mode export, built and encoded: the devices on the node's resource, each pod's
/// shares on its own.
#[divan::bench(args = NODE_DEVICES)]
fn node_export_total(bencher: Bencher, devices: usize) {
    let mut node = NodeFixture::new(devices);
    let p = ExportPipeline::node(node.annotated());
    bencher
        .counter(ItemsCount::new(p.snapshot.devices.len()))
        .bench_local(|| p.encode(&p.build()).len());
}

/// A node's snapshot as node mode sees it: every device that lists processes given `k`
/// processes of `k` pods (4 on a GPU, 2 on a MIG device), the kubelet's allocations of them
/// as replicas, and a made-up proc root holding each one's cgroup file.
struct NodeFixture {
    snapshot: Snapshot,
    attribution: NodeAttribution,
    pods: usize,
    _proc: tempfile::TempDir,
}

impl NodeFixture {
    fn new(devices: usize) -> Self {
        let mut snapshot = snapshot(devices);
        let proc = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(proc.path().join("2")).unwrap();
        std::fs::write(proc.path().join("2/comm"), "kthreadd\n").unwrap();
        let mut allocations = Vec::new();
        let mut pods = 0;
        for (i, d) in snapshot.devices.iter_mut().enumerate() {
            if d.processes.is_none() {
                continue; // a GPU in MIG mode: its processes are on its MIG devices
            }
            let k = if d.info.mig.is_some() { 2 } else { 4 };
            let mut list = Vec::new();
            for j in 0..k {
                let pid = 100_000 + 10 * i as u32 + j;
                let uid = format!("{:08x}-0000-4000-8000-{:012x}", i, j);
                let dir = proc.path().join(pid.to_string());
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(
                    dir.join("cgroup"),
                    format!(
                        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{:064x}.scope\n",
                        uid.replace('-', "_"),
                        pid
                    ),
                )
                .unwrap();
                list.push(ProcessSample {
                    pid,
                    used_memory_bytes: Some((1 + u64::from(j)) << 30),
                    executable_name: Some("python3".into()),
                    utilization: Some(ProcessUtilization {
                        sm_percent: 10.0 * f64::from(j + 1),
                        ..ProcessUtilization::default()
                    }),
                });
                allocations.push(Allocation {
                    namespace: "ml".into(),
                    pod: format!("infer-{i}-{j}"),
                    container: "server".into(),
                    id: DeviceId::Uuid(d.info.uuid.clone()),
                    shared: true,
                });
                pods += 1;
            }
            d.processes = Some(list);
        }
        let view = Arc::new(KubeletView::default());
        view.set(allocations);
        Self {
            attribution: NodeAttribution::new(proc.path(), view),
            snapshot,
            pods,
            _proc: proc,
        }
    }

    /// The snapshot with its shares (its processes' cgroup files read).
    fn annotated(&mut self) -> Snapshot {
        let mut s = self.snapshot.clone();
        self.attribution.annotate(&mut s, true);
        s
    }
}

/// Run lengths (minutes) at which the rules' cost per tick is measured.
const RUN_MINUTES_1S: &[u64] = &[0, 1, 2, 3, 5, 10, 20, 30, 60];
const RUN_MINUTES_100MS: &[u64] = &[0, 1, 2, 3, 5, 10, 20];

/// The rules on 64 devices sampled every second: the minute after `minutes` of run.
#[divan::bench(args = RUN_MINUTES_1S, sample_count = 5, sample_size = 1)]
fn rules_1s(bencher: Bencher, minutes: u64) {
    bench_rules(bencher, minutes, Duration::from_secs(1));
}

/// The same at 100 ms sampling.
#[divan::bench(args = RUN_MINUTES_100MS, sample_count = 3, sample_size = 1)]
fn rules_100ms(bencher: Bencher, minutes: u64) {
    bench_rules(bencher, minutes, Duration::from_millis(100));
}

/// Tick `k` of a rules run: `base`'s readings at `start + k x step`, each device with a GPM
/// window (the H200's figures under bf16 training) that ends every 10 s and is carried into
/// the ticks in between, as the sampler delivers them.
fn rules_tick(base: &Snapshot, start: Instant, step: Duration, k: u64) -> Snapshot {
    let at = step * k as u32;
    let window = (at.as_secs() / 10) as f64;
    let mut snap = base.clone();
    snap.seq = k + 1;
    snap.taken_instant = start + at;
    snap.taken_at = base.taken_at + at;
    for d in &mut snap.devices {
        d.gpm = (window > 0.0).then(|| GpmMetrics {
            // Each window's own length: two windows are never equal.
            window_seconds: 10.0 + window * 1e-9,
            graphics_util: Some(99.0),
            sm_util: Some(88.0),
            sm_occupancy: Some(40.0),
            any_tensor_util: Some(82.0),
            hmma_tensor_util: Some(82.0),
            dram_bw_util: Some(17.0),
            fp32_util: Some(3.0),
            ..GpmMetrics::default()
        });
    }
    snap
}

/// This thread's CPU time.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a pointer to a timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The rules' CPU time per tick for each minute of one run (see the module docs).
fn rules_curve() {
    let base = snapshot(56);
    let config = Config::from_vars(std::iter::empty::<(String, String)>())
        .expect("default configuration")
        .rules;
    for (step, minutes) in [
        (Duration::from_secs(1), 30u64),
        (Duration::from_millis(100), 10),
    ] {
        let mut engine = Engine::new(&config);
        let per_minute = (Duration::from_secs(60).as_nanos() / step.as_nanos()) as u64;
        let start = Instant::now();
        for m in 0..minutes {
            let cpu = thread_cpu();
            for k in m * per_minute..(m + 1) * per_minute {
                std::hint::black_box(engine.observe(&rules_tick(&base, start, step, k)));
            }
            let cpu = thread_cpu() - cpu;
            println!(
                "rules curve: {} devices, {step:?} sampling, minute {m:>2}: {:>8.3} ms CPU per tick, {:>9.1} ms per minute of run",
                base.devices.len(),
                cpu.as_secs_f64() * 1e3 / per_minute as f64,
                cpu.as_secs_f64() * 1e3
            );
        }
    }
}

fn bench_rules(bencher: Bencher, minutes: u64, step: Duration) {
    let base = snapshot(56);
    let per_minute = (Duration::from_secs(60).as_nanos() / step.as_nanos()) as u64;
    let config = Config::from_vars(std::iter::empty::<(String, String)>())
        .expect("default configuration")
        .rules;
    let start = Instant::now();
    let tick =
        move |engine: &mut Engine, k: u64| engine.observe(&rules_tick(&base, start, step, k)).len();
    let tick2 = tick.clone();
    bencher
        .counter(ItemsCount::new(per_minute as usize))
        .with_inputs(move || {
            let mut engine = Engine::new(&config);
            for k in 0..minutes * per_minute {
                tick(&mut engine, k);
            }
            engine
        })
        .bench_local_values(move |mut engine| {
            let from = minutes * per_minute;
            let mut alerts = 0;
            for k in from..from + per_minute {
                alerts += tick2(&mut engine, k);
            }
            (engine, alerts)
        });
}

// ---- setup ----------------------------------------------------------------------------

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `$NVML_MOCK_LIB`, else `target/release/libnvml_mock.so`; when neither exists, the mock
/// is built in release mode into `target/nvml-mock-bench` (a target directory of its own:
/// the running cargo holds the lock on `target/`).
fn mock_library() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(find_or_build_mock).clone()
}

fn find_or_build_mock() -> PathBuf {
    if let Some(lib) = std::env::var_os("NVML_MOCK_LIB") {
        return PathBuf::from(lib);
    }
    let lib = root().join("target/release/libnvml_mock.so");
    if lib.is_file() {
        return lib;
    }
    let target_dir = root().join("target/nvml-mock-bench");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = std::process::Command::new(cargo)
        .current_dir(root())
        .args(["build", "--release", "-p", "nvml-mock", "--target-dir"])
        .arg(&target_dir)
        .status()
        .expect("run cargo to build nvml-mock");
    assert!(status.success(), "building nvml-mock failed");
    target_dir.join("release/libnvml_mock.so")
}

/// Sampler settings for `devices` devices, on a copy of the mock library of its own, whose
/// first init (done here, once per copy) reads the scenario and the latency setting.
fn setup(devices: usize, latency: bool) -> SamplerSettings {
    static COPIES: OnceLock<Mutex<Vec<PathBuf>>> = OnceLock::new();
    let scenario = if devices > 8 {
        "bench-8gpu-mig7"
    } else {
        "bench-8gpu"
    };
    let name = format!("{scenario}{}.so", if latency { "-latency" } else { "" });
    let dir = copies_dir();
    let copy = dir.join(name);
    let copies = COPIES.get_or_init(Default::default);
    let mut copies = copies.lock().unwrap();
    let settings = SamplerSettings {
        // The default cadence of the slow groups: a tick costs what it costs in a run.
        timing: gpu_otel_sidecar::sampling::Timing::every(Duration::from_secs(1)),
        nvml_library: copy.clone(),
        devices: if devices == 1 {
            DeviceSelection::List(vec![DeviceId::Index(0)])
        } else {
            DeviceSelection::All
        },
        library_advice: Default::default(),
        proc_root: "/proc".into(),
        mps_clients: false,
    };
    if !copies.contains(&copy) {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(mock_library(), &copy).unwrap();
        // Read by the mock inside this copy's first nvmlInit, right below.
        std::env::set_var(
            "NVML_MOCK_SCENARIO",
            root().join(format!("tests/scenarios/{scenario}.json")),
        );
        if latency {
            std::env::remove_var("NVML_MOCK_NO_LATENCY");
        } else {
            std::env::set_var("NVML_MOCK_NO_LATENCY", "1");
        }
        sampling::with_session(&settings, |_| ())
            .unwrap_or_else(|e| panic!("NVML init through {} failed: {e}", copy.display()));
        copies.push(copy);
    }
    settings
}

/// A snapshot of `devices` devices as the sampler produces it (no latency). When the agent
/// samples fewer devices than asked (MIG devices not sampled yet), the sampled GPUs are
/// repeated under other UUIDs up to `devices`: full GPU samples, more fields than a MIG
/// device has, so an upper bound for the mapping and the export. When it samples more (the
/// 8 GPUs and their 56 MIG devices), all of them are kept.
fn snapshot(devices: usize) -> Snapshot {
    let settings = setup(devices, false);
    let mut samples = sampling::with_session(&settings, |sample| sample())
        .unwrap_or_else(|e| panic!("NVML init through the mock failed: {e}"));
    assert!(!samples.is_empty(), "the mock showed no device");
    let sampled = samples.len();
    let mut k = 0;
    while samples.len() < devices {
        let mut s: DeviceSample = samples[k % sampled].clone();
        s.info = Arc::new(DeviceInfo {
            uuid: format!("MIG-00000000-0000-4000-8000-{k:012x}"),
            ..(*s.info).clone()
        });
        samples.push(s);
        k += 1;
    }
    Snapshot {
        taken_at: SystemTime::now(),
        taken_instant: Instant::now(),
        seq: 1,
        export: true,
        devices: samples,
    }
}

/// The agent's metrics pipeline (resource, scope, catalogue, series state) over one
/// snapshot, built on demand as each export builds it.
struct ExportPipeline {
    encoder: Mutex<Encoder>,
    recorded: Arc<Recorded>,
    snapshot: Snapshot,
}

impl ExportPipeline {
    /// Node mode's pipeline: the node's resource (`K8S_NODE_NAME`), shares per pod.
    fn node(snapshot: Snapshot) -> Self {
        let (config, _) = Config::from_vars(
            [("K8S_NODE_NAME", "gpu-node-7")].map(|(k, v)| (k.to_string(), v.to_string())),
        )
        .and_then(Config::into_node)
        .expect("bench configuration");
        Self::with_config(&config, snapshot)
    }

    fn new(snapshot: Snapshot) -> Self {
        let config = Config::from_vars(
            [
                ("K8S_POD_NAME", "resnet-train-0"),
                ("K8S_POD_UID", "4f1c7e2a-0000-4000-8000-000000000001"),
                ("K8S_NAMESPACE_NAME", "ml"),
                ("K8S_NODE_NAME", "gpu-node-7"),
                ("K8S_CONTAINER_NAME", "trainer"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string())),
        )
        .expect("bench configuration");
        Self::with_config(&config, snapshot)
    }

    fn with_config(config: &Config, snapshot: Snapshot) -> Self {
        let encoder = Encoder::new(
            &attribution::resource(config),
            config.otlp.temporality,
            Duration::from_secs(3600),
            SystemTime::now(),
        );
        Self {
            encoder: Mutex::new(encoder),
            recorded: Recorded::new(),
            snapshot,
        }
    }

    fn build(&self) -> ExportMetricsServiceRequest {
        self.encoder
            .lock()
            .unwrap()
            .encode(
                Some(&self.snapshot),
                &self.recorded,
                &OwnValues::default(),
                Stamp::now(),
            )
            .request
    }

    fn encode(&self, request: &ExportMetricsServiceRequest) -> Vec<u8> {
        request.encode_to_vec()
    }
}
