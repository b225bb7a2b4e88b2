//! The page from a run fed to the real accumulator: what a reader (and a test) finds in it.
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use super::*;
use crate::report::timeline::RunEvent;
use crate::report::RunAccumulator;
use crate::rules::preallocation::PoolParams;
use crate::sampling::{DeviceInfo, DeviceSample, DeviceState, GpmMetrics, ProcessSample, Snapshot};

const TOTAL: u64 = 80 << 30;

fn info(index: u32, uuid: &str, name: &str) -> Arc<DeviceInfo> {
    Arc::new(DeviceInfo {
        index,
        uuid: uuid.into(),
        name: Some(name.into()),
        serial: None,
        pci_bus_id: None,
        vbios_version: None,
        driver_version: None,
        mig: None,
        gpm_supported: None,
    })
}

/// 30 ticks 1 s apart. GPU 0 (H100, GPM): a process appears at 2 s and takes a pool of
/// 97 % at 3 s; power limit 700 W; 40 °C but 88 °C at 20 s; thermal slowdown from 10 s
/// to 14 s. GPU 1 (A100, no GPM): memory grows by 1 GiB a second.
fn run() -> (serde_json::Value, Curves) {
    let (a, b) = (
        info(0, "GPU-a", "NVIDIA H100"),
        info(1, "GPU-b", "NVIDIA A100"),
    );
    let mut acc = RunAccumulator::new(&crate::sampling::Timing::every(Duration::from_secs(1)))
        .with_price_per_gpu_hour(Some(2.0))
        .with_pool_params(PoolParams::from_rule(70.0, Duration::from_secs(6)))
        .with_curves();
    let base = Instant::now();
    for t in 0..30u64 {
        let mut s0 = DeviceSample::empty(a.clone(), DeviceState::Ok);
        s0.utilization_gpu_percent = Some(if t < 3 { 0 } else { 97 });
        s0.memory_total_bytes = Some(TOTAL);
        s0.memory_used_bytes = Some(if t < 3 { 1 << 30 } else { TOTAL * 97 / 100 });
        s0.processes = Some(if t < 2 {
            Vec::new()
        } else {
            vec![ProcessSample {
                pid: 4242,
                used_memory_bytes: s0.memory_used_bytes,
                ..ProcessSample::default()
            }]
        });
        s0.power_milliwatts = Some(650_000);
        s0.power_limit_milliwatts = Some(700_000);
        s0.energy_millijoules = Some(1_000_000 + t * 650_000);
        s0.temperature_gpu_celsius = Some(if t == 20 { 88 } else { 40 });
        s0.clocks_event_reasons = Some(if (10..14).contains(&t) { 0x20 } else { 0 });
        s0.gpm = Some(GpmMetrics {
            window_seconds: 1.0,
            sm_util: Some(90.0 + (t % 2) as f64),
            any_tensor_util: Some(80.0),
            ..GpmMetrics::default()
        });
        let mut s1 = DeviceSample::empty(b.clone(), DeviceState::Ok);
        s1.utilization_gpu_percent = Some(50);
        s1.memory_total_bytes = Some(TOTAL);
        s1.memory_used_bytes = Some((t + 1) << 30);
        s1.power_milliwatts = Some(300_000);
        s1.temperature_gpu_celsius = Some(50);
        acc.add(&Snapshot {
            taken_at: UNIX_EPOCH + Duration::from_secs(1_800_000_000 + t),
            taken_instant: base + Duration::from_secs(t),
            seq: t + 1,
            export: true,
            devices: vec![s0, s1],
        });
    }
    let mut report = acc.report(BTreeMap::from([(
        "k8s.pod.name".to_string(),
        "train-0".to_string(),
    )]));
    report.events = vec![
        RunEvent {
            time: "2027-01-15T08:00:10.000Z".into(),
            name: "nvidia.gpu.xid",
            severity: "ERROR",
            hw_id: Some("GPU-a".into()),
            state: None,
            body: "GPU 0: XID 79 <fell off the bus>".into(),
        },
        RunEvent {
            time: "2027-01-15T08:00:25.000Z".into(),
            name: "nvidia.gpu.alert.utilization_imbalance",
            severity: "WARN",
            hw_id: None,
            state: Some("firing".into()),
            body: "pod: one GPU idles".into(),
        },
    ];
    let curves = acc.curves().cloned().unwrap();
    (serde_json::to_value(&report).unwrap(), curves)
}

/// The tags of `html` that start with `start` (e.g. `<path class="series`).
fn tags<'a>(html: &'a str, start: &str) -> Vec<&'a str> {
    html.match_indices(start)
        .map(|(i, _)| &html[i..i + html[i..].find('>').unwrap()])
        .collect()
}

fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let i = tag.find(&key)? + key.len();
    Some(&tag[i..i + tag[i..].find('"')?])
}

/// GPU `uuid`'s figure.
fn figure<'a>(html: &'a str, uuid: &str) -> &'a str {
    let i = html
        .find(&format!("data-gpu-uuid=\"{uuid}\""))
        .unwrap_or_else(|| panic!("no chart of {uuid}"));
    &html[i..i + html[i..].find("</figure>").unwrap()]
}

fn series(fig: &str) -> BTreeMap<&str, &str> {
    tags(fig, "<path class=\"series")
        .into_iter()
        .map(|t| (attr(t, "data-series").unwrap(), t))
        .collect()
}

#[test]
fn each_gpu_has_its_chart_with_the_series_it_gave() {
    let (report, curves) = run();
    let html = render(&report, Some(&curves), &CurvesSource::Agent);
    assert_eq!(tags(&html, "<figure class=\"gpu-chart\"").len(), 2);

    // GPU 0: every reading, and the pool's level (preallocated).
    assert_eq!(report["gpus"][0]["memory_pattern"], "preallocated");
    let fig0 = figure(&html, "GPU-a");
    let s0 = series(fig0);
    assert_eq!(
        s0.keys().copied().collect::<Vec<_>>(),
        [
            "memory_pool",
            "memory_total_mib",
            "memory_used_mib",
            "power_limit_w",
            "power_w",
            "sm_activity_percent",
            "temperature_gpu_c",
            "tensor_activity_percent",
            "utilization_gpu_percent"
        ]
    );
    assert!(fig0.contains("data-series-count=\"9\""));
    let pool_gib = (TOTAL * 97 / 100) as f64 / (1u64 << 30) as f64;
    assert_eq!(
        attr(s0["memory_pool"], "data-max"),
        Some(pool_gib.to_string().as_str())
    );
    // The one-sample 88 °C among 40 °C, and the SM activity's 90/91 alternation, drawn.
    assert_eq!(attr(s0["temperature_gpu_c"], "data-max"), Some("88"));
    assert_eq!(attr(s0["temperature_gpu_c"], "data-min"), Some("40"));
    assert_eq!(attr(s0["sm_activity_percent"], "data-min"), Some("90"));
    assert_eq!(attr(s0["power_limit_w"], "data-max"), Some("700"));
    assert_eq!(
        attr(s0["utilization_gpu_percent"], "data-points"),
        Some("30")
    );
    // Thermal slowdown from 10 s to 14 s: one rectangle of the lane's second row.
    let lane: Vec<&str> = tags(fig0, "<rect class=\"hb");
    assert_eq!(lane.len(), 1, "{lane:?}");
    assert!(lane[0].starts_with("<rect class=\"hb1\""));
    // Its XID and the pod's alert are marked; the XID's body is escaped.
    let markers = tags(fig0, "<g class=\"marker");
    assert_eq!(markers.len(), 2);
    assert!(markers[0].contains("sev-error") && markers[1].contains("sev-warn"));
    assert!(
        fig0.contains("XID 79 &#60;fell off the bus&#62;"),
        "escaped"
    );

    // GPU 1: no GPM, no power limit: those series are absent and the panel says why; only
    // the pod's alert is marked.
    let fig1 = figure(&html, "GPU-b");
    let s1 = series(fig1);
    assert_eq!(s1.len(), 5, "{:?}", s1.keys());
    assert!(!s1.contains_key("sm_activity_percent") && !s1.contains_key("memory_pool"));
    assert!(fig1.contains("no GPM reading"));
    assert!(fig1.contains("no power limit read"));
    assert_eq!(tags(fig1, "<g class=\"marker").len(), 1);
    assert_eq!(attr(s1["memory_used_mib"], "data-max"), Some("30"));
}

#[test]
fn the_summary_says_every_figure_and_why_one_is_absent() {
    let (report, curves) = run();
    let html = render(&report, Some(&curves), &CurvesSource::Agent);
    let cell = |figure: &str, scope: &str| {
        let key = format!("data-figure=\"{figure}\" data-scope=\"{scope}\"");
        let i = html.find(&key).unwrap_or_else(|| panic!("no cell {key}"));
        let open = html[..i].rfind("<td").unwrap();
        let close = i + html[i..].find("</td>").unwrap();
        &html[open..close]
    };
    let energy = cell("energy_j", "pod");
    let j = report["pod"]["energy_j"].as_f64().unwrap();
    // GPU 0's counter and GPU 1's power integrated, over 29 s.
    assert_eq!(j, 29.0 * 650.0 + 29.0 * 300.0);
    let value: f64 = attr(energy, "data-value").unwrap().parse().unwrap();
    assert_eq!(value, j, "{energy}");
    assert!(
        energy.ends_with(&format!(">{j} J (0.00765 kWh)")),
        "{energy}"
    );
    assert!(cell("energy_source", "pod").ends_with(">mixed"));
    assert!(cell("memory_pattern", "GPU-a").ends_with(">preallocated"));
    assert!(cell("memory_pattern", "GPU-b").ends_with(">growing"));
    let sm = cell("sm_activity_mean", "GPU-b");
    assert!(
        sm.contains("class=\"absent\"") && sm.contains("no GPM reading"),
        "{sm}"
    );
    assert!(sm.ends_with(">—"));
    assert!(
        html.contains("<li>GPU 1 · NVIDIA A100: SM activity (mean), SM occupancy (mean), tensor activity (mean), tensor share of busy time, DRAM activity (mean): no GPM reading"),
        "the absent list names each GPM figure once"
    );
    assert!(html.contains("gave no GPM reading"), "the report's note");
    let events = tags(&html, "<tr class=\"event");
    assert_eq!(events.len(), 2);
    assert!(events[0].contains("sev-error"));
    // One page: nothing fetched, no script, light and dark.
    for banned in [
        "<script", "src=", "href=", "url(", "http:", "https:", "@import",
    ] {
        assert!(!html.contains(banned), "{banned}");
    }
    assert!(html.contains("@media (prefers-color-scheme: dark)"));
}

#[test]
fn without_curves_the_page_says_how_to_get_them() {
    let (report, _) = run();
    let html = render(&report, None, &CurvesSource::None);
    assert!(!html.contains("<figure"));
    assert!(html.contains("No curves: give the run&#39;s sample log"));
    assert!(html.contains("data-figure=\"energy_j\""));
}
