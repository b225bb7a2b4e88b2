//! Scenario file: parsing, validation and timeline lookup.
//!
//! The format is documented in `tests/nvml-mock/README.md`.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::symbols::EXPORTED;

/// Top level of a scenario file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    #[serde(default)]
    #[allow(dead_code)]
    pub description: Option<String>,
    #[serde(default = "default_driver")]
    pub driver_version: String,
    #[serde(default = "default_nvml")]
    pub nvml_version: String,
    #[serde(default = "default_cuda")]
    pub cuda_driver_version: i32,
    #[serde(default)]
    pub init_error: Option<u32>,
    #[serde(default, rename = "loop")]
    pub looping: bool,
    #[serde(default)]
    pub time_scale: Option<f64>,
    #[serde(default)]
    pub devices: Vec<DeviceSpec>,
    #[serde(default)]
    pub faults: Vec<Fault>,
    #[serde(default)]
    pub events: Vec<EventSpec>,
}

fn default_driver() -> String {
    "580.159.04".into()
}
fn default_nvml() -> String {
    "13.580.159.04".into()
}
fn default_cuda() -> i32 {
    13000
}

/// A physical GPU, or (inside `mig.instances`) a MIG device.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceSpec {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub uuid: Option<String>,
    #[serde(default)]
    pub serial: Option<String>,
    #[serde(default)]
    pub pci_bus_id: Option<String>,
    #[serde(default)]
    pub pci_device_id: Option<u32>,
    #[serde(default)]
    pub pci_sub_system_id: Option<u32>,
    #[serde(default)]
    pub vbios_version: Option<String>,
    #[serde(default)]
    pub minor_number: Option<u32>,
    #[serde(default)]
    pub brand: Option<u32>,
    #[serde(default)]
    pub architecture: Option<u32>,
    #[serde(default)]
    pub max_clocks_mhz: Option<Clocks>,
    #[serde(default)]
    pub persistence_mode: Option<bool>,
    #[serde(default)]
    pub supported_event_types: Option<u64>,
    #[serde(default)]
    pub gpm_supported: Option<bool>,
    #[serde(default)]
    pub codec_sampling_period_us: Option<u32>,
    #[serde(default)]
    pub process_util_period_s: Option<f64>,
    /// `true`: the counters (energy, ECC) grow linearly between a row and the next instead
    /// of stepping at each row (a step down, a reset, stays a step).
    #[serde(default)]
    pub linear_counters: bool,
    #[serde(default)]
    pub mig: Option<MigSpec>,
    /// Only for a MIG device.
    #[serde(default)]
    pub gpu_instance_id: Option<u32>,
    /// Only for a MIG device.
    #[serde(default)]
    pub compute_instance_id: Option<u32>,
    #[serde(default)]
    pub unsupported: Vec<String>,
    #[serde(default)]
    pub errors: BTreeMap<String, u32>,
    #[serde(default)]
    pub latency_us: BTreeMap<String, u64>,
    #[serde(default)]
    pub defaults: Map<String, Value>,
    #[serde(default)]
    pub timeline: Vec<Value>,
}

#[derive(Debug, Deserialize, Clone, Copy, Default)]
#[serde(deny_unknown_fields)]
pub struct Clocks {
    #[serde(default)]
    pub graphics: Option<u32>,
    #[serde(default)]
    pub sm: Option<u32>,
    #[serde(default)]
    pub mem: Option<u32>,
    #[serde(default)]
    pub video: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigSpec {
    pub current: u32,
    #[serde(default)]
    pub pending: Option<u32>,
    #[serde(default)]
    pub max_devices: Option<u32>,
    #[serde(default)]
    pub instances: Vec<DeviceSpec>,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    pub call: String,
    #[serde(default)]
    pub device: Option<usize>,
    #[serde(default)]
    pub from_s: f64,
    #[serde(default)]
    pub to_s: Option<f64>,
    #[serde(default)]
    pub code: Option<u32>,
    #[serde(default)]
    pub block_s: Option<f64>,
}

impl Fault {
    pub fn matches_call(&self, sym: &str) -> bool {
        call_matches(&self.call, sym)
    }
    pub fn active_at(&self, e: f64) -> bool {
        e >= self.from_s && self.to_s.is_none_or(|to| e < to)
    }
}

/// `"*"` matches every device or system call (not init, shutdown, error string);
/// `"prefix*"` matches by prefix; anything else must be equal.
pub fn call_matches(pattern: &str, sym: &str) -> bool {
    if pattern == "*" {
        return !matches!(
            sym,
            "nvmlInit_v2" | "nvmlInitWithFlags" | "nvmlShutdown" | "nvmlErrorString"
        ) && !sym.starts_with("field:");
    }
    if let Some(prefix) = pattern.strip_suffix('*') {
        return sym.starts_with(prefix);
    }
    pattern == sym
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct EventSpec {
    pub t: f64,
    #[serde(default)]
    pub device: usize,
    #[serde(rename = "type")]
    pub kind: EventKind,
    #[serde(default)]
    pub data: u64,
    #[serde(default)]
    pub gpu_instance_id: Option<u32>,
    #[serde(default)]
    pub compute_instance_id: Option<u32>,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(untagged)]
pub enum EventKind {
    Bits(u64),
    Name(String),
}

impl EventKind {
    pub fn bits(&self) -> Result<u64, String> {
        match self {
            EventKind::Bits(b) => Ok(*b),
            EventKind::Name(n) => match n.as_str() {
                "ecc_single" | "single_bit_ecc" => Ok(0x1),
                "ecc_double" | "double_bit_ecc" => Ok(0x2),
                "pstate" => Ok(0x4),
                "xid" => Ok(0x8),
                "clock" => Ok(0x10),
                "power_source" => Ok(0x80),
                "mig_config" => Ok(0x100),
                other => Err(format!("unknown event type name {other:?}")),
            },
        }
    }
}

/// One timeline row after `defaults` were merged in. `None` = NOT_SUPPORTED.
#[derive(Debug, Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct Row {
    pub t: f64,
    pub util_gpu: Option<u32>,
    pub util_mem: Option<u32>,
    pub util_enc: Option<u32>,
    pub util_dec: Option<u32>,
    pub mem_total: Option<u64>,
    pub mem_reserved: Option<u64>,
    pub mem_used: Option<u64>,
    pub mem_free: Option<u64>,
    pub temp_gpu: Option<u32>,
    pub temp_mem: Option<u32>,
    pub power_mw: Option<u32>,
    pub power_limit_mw: Option<u32>,
    pub power_mgmt_limit_mw: Option<u32>,
    pub energy_mj: Option<u64>,
    pub clock_graphics_mhz: Option<u32>,
    pub clock_sm_mhz: Option<u32>,
    pub clock_mem_mhz: Option<u32>,
    pub clock_video_mhz: Option<u32>,
    pub clocks_event_reasons: Option<u64>,
    pub pstate: Option<u32>,
    pub ecc_corrected: Option<u64>,
    pub ecc_uncorrected: Option<u64>,
    pub ecc_corrected_aggregate: Option<u64>,
    pub ecc_uncorrected_aggregate: Option<u64>,
    pub processes: Option<Vec<Vec<u64>>>,
    pub graphics_processes: Option<Vec<Vec<u64>>>,
    pub mps_processes: Option<Vec<Vec<u64>>>,
    pub process_util: Option<Vec<Vec<u64>>>,
    pub pcie_tx_kbps: Option<u32>,
    pub pcie_rx_kbps: Option<u32>,
    pub fan_speed_pct: Option<u32>,
    pub remapped_rows: Option<[u32; 4]>,
    pub fields: Option<BTreeMap<String, serde_json::Number>>,
    pub gpm: Option<BTreeMap<String, f64>>,
}

/// Counters that must keep growing across loop wraps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    Energy,
    EccCorrected,
    EccUncorrected,
    EccCorrectedAggregate,
    EccUncorrectedAggregate,
}

impl Counter {
    const ALL: [Counter; 5] = [
        Counter::Energy,
        Counter::EccCorrected,
        Counter::EccUncorrected,
        Counter::EccCorrectedAggregate,
        Counter::EccUncorrectedAggregate,
    ];
    fn get(self, r: &Row) -> Option<u64> {
        match self {
            Counter::Energy => r.energy_mj,
            Counter::EccCorrected => r.ecc_corrected,
            Counter::EccUncorrected => r.ecc_uncorrected,
            Counter::EccCorrectedAggregate => r.ecc_corrected_aggregate,
            Counter::EccUncorrectedAggregate => r.ecc_uncorrected_aggregate,
        }
    }
}

#[derive(Debug, Default)]
pub struct Timeline {
    pub rows: Vec<Row>,
    /// Loop period, when looping with at least two rows.
    pub period: Option<f64>,
    /// Per-wrap increment for each counter (last - first), by `Counter::ALL` order.
    deltas: [u64; 5],
}

impl Timeline {
    fn build(
        defaults: &Map<String, Value>,
        raw: &[Value],
        looping: bool,
        what: &str,
    ) -> Result<Self, String> {
        let mut rows = Vec::with_capacity(raw.len());
        for (i, v) in raw.iter().enumerate() {
            let Value::Object(obj) = v else {
                return Err(format!("{what}: timeline[{i}] is not an object"));
            };
            let mut merged = defaults.clone();
            for (k, v) in obj {
                merged.insert(k.clone(), v.clone());
            }
            let row: Row = serde_json::from_value(Value::Object(merged))
                .map_err(|e| format!("{what}: timeline[{i}]: {e}"))?;
            validate_row(&row).map_err(|e| format!("{what}: timeline[{i}]: {e}"))?;
            if let Some(prev) = rows.last() {
                let prev: &Row = prev;
                if row.t < prev.t {
                    return Err(format!("{what}: timeline[{i}]: t goes backwards"));
                }
            }
            rows.push(row);
        }
        let mut tl = Timeline {
            rows,
            period: None,
            deltas: [0; 5],
        };
        let n = tl.rows.len();
        if looping && n >= 2 {
            let last = tl.rows[n - 1].t;
            let step = last - tl.rows[n - 2].t;
            let period = last + step;
            if period > 0.0 {
                tl.period = Some(period);
            }
            for (i, c) in Counter::ALL.iter().enumerate() {
                if let (Some(a), Some(b)) = (c.get(&tl.rows[0]), c.get(&tl.rows[n - 1])) {
                    tl.deltas[i] = b.saturating_sub(a);
                }
            }
        }
        Ok(tl)
    }

    /// The row in force at elapsed scenario time `e`, and how many loop wraps happened.
    pub fn at(&self, e: f64) -> Option<(&Row, u64)> {
        if self.rows.is_empty() {
            return None;
        }
        let (em, wraps) = match self.period {
            Some(p) if e >= p => {
                let w = (e / p).floor();
                (e - w * p, w as u64)
            }
            _ => (e, 0),
        };
        // last row with t <= em (first row when em is before it)
        let idx = self.rows.partition_point(|r| r.t <= em);
        let idx = idx.saturating_sub(1);
        Some((&self.rows[idx], wraps))
    }

    /// The row in force at `e` (index), and the scenario times at which that stretch of
    /// the (unrolled) timeline started and ends.
    pub fn segment(&self, e: f64) -> Option<(usize, f64, f64)> {
        if self.rows.is_empty() {
            return None;
        }
        let (em, base) = match self.period {
            Some(p) if e >= p => {
                let w = (e / p).floor();
                (e - w * p, w * p)
            }
            _ => (e, 0.0),
        };
        let idx = self.rows.partition_point(|r| r.t <= em).saturating_sub(1);
        let start = base + self.rows[idx].t.min(em);
        let end = if idx + 1 < self.rows.len() {
            base + self.rows[idx + 1].t
        } else {
            match self.period {
                Some(p) => base + p,
                None => f64::INFINITY,
            }
        };
        Some((idx, start, end))
    }

    pub fn counter(&self, c: Counter, row: &Row, wraps: u64) -> Option<u64> {
        let i = Counter::ALL.iter().position(|x| *x == c).unwrap_or(0);
        c.get(row)
            .map(|v| v.saturating_add(self.deltas[i].saturating_mul(wraps)))
    }

    /// The counter at scenario time `e`, growing linearly from the row in force to the
    /// next row (`linear_counters`); a next row below it (a reset) or no next row: the row's
    /// value.
    pub fn counter_linear(&self, c: Counter, e: f64) -> Option<u64> {
        let (idx, start, end) = self.segment(e)?;
        let (row, wraps) = self.at(e)?;
        let here = self.counter(c, row, wraps)?;
        let next = match self.rows.get(idx + 1) {
            Some(r) => self.counter(c, r, wraps),
            // Looping: the next stretch starts the next wrap at the first row.
            None if self.period.is_some() => self.counter(c, &self.rows[0], wraps + 1),
            None => None,
        };
        match next {
            Some(n) if n >= here && end.is_finite() && end > start => {
                let f = ((e - start) / (end - start)).clamp(0.0, 1.0);
                Some(here + ((n - here) as f64 * f) as u64)
            }
            _ => Some(here),
        }
    }
}

fn validate_row(r: &Row) -> Result<(), String> {
    if !r.t.is_finite() || r.t < 0.0 {
        return Err("t must be a finite number >= 0".into());
    }
    for (name, list) in [
        ("processes", &r.processes),
        ("graphics_processes", &r.graphics_processes),
        ("mps_processes", &r.mps_processes),
    ] {
        if let Some(list) = list {
            for p in list {
                if p.len() != 2 && p.len() != 4 {
                    return Err(format!(
                        "{name}: each entry is [pid, used_bytes] or [pid, used_bytes, gpu_instance_id, compute_instance_id]"
                    ));
                }
            }
        }
    }
    if let Some(list) = &r.process_util {
        for p in list {
            if p.len() != 5 {
                return Err("process_util: each entry is [pid, sm, mem, enc, dec]".into());
            }
        }
    }
    if let Some(fields) = &r.fields {
        for k in fields.keys() {
            if k.parse::<u32>().is_err() {
                return Err(format!("fields: key {k:?} is not a field id number"));
            }
        }
    }
    if let Some(gpm) = &r.gpm {
        for k in gpm.keys() {
            if crate::gpm::metric_id(k).is_none() {
                return Err(format!("gpm: unknown metric {k:?}"));
            }
        }
    }
    Ok(())
}

fn check_call_name(name: &str, what: &str, allow_patterns: bool) -> Result<(), String> {
    if let Some(id) = name.strip_prefix("field:") {
        return id
            .parse::<u32>()
            .map(|_| ())
            .map_err(|_| format!("{what}: bad field id in {name:?}"));
    }
    if allow_patterns && name == "*" {
        return Ok(());
    }
    if allow_patterns {
        if let Some(prefix) = name.strip_suffix('*') {
            if EXPORTED.iter().any(|s| s.starts_with(prefix)) {
                return Ok(());
            }
            return Err(format!(
                "{what}: pattern {name:?} matches no exported symbol"
            ));
        }
    }
    if EXPORTED.contains(&name) {
        Ok(())
    } else {
        Err(format!("{what}: {name:?} is not a symbol the mock exports"))
    }
}

/// A device (physical or MIG) ready to be served.
#[derive(Debug)]
pub struct Dev {
    pub spec: DeviceSpec,
    pub timeline: Timeline,
    /// Index among physical devices (the parent's index for a MIG device).
    pub phys_index: usize,
    /// For a MIG device: its id in `Loaded::all` of the parent. None for physical.
    pub parent: Option<usize>,
    /// For a physical device: ids in `Loaded::all` of its MIG devices.
    pub mig_children: Vec<usize>,
}

impl Dev {
    pub fn is_mig(&self) -> bool {
        self.parent.is_some()
    }
}

pub struct Parsed {
    pub scenario: Scenario,
    /// Physical devices first (0..n), then MIG devices.
    pub all: Vec<Dev>,
    pub physical_count: usize,
}

pub fn parse(text: &str) -> Result<Parsed, String> {
    let mut scenario: Scenario = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let looping = scenario.looping;
    if let Some(s) = scenario.time_scale {
        if !s.is_finite() || s < 0.0 {
            return Err("time_scale must be a finite number >= 0".into());
        }
    }
    let devices = std::mem::take(&mut scenario.devices);
    let physical_count = devices.len();
    let mut all: Vec<Dev> = Vec::new();
    let mut pending_mig: Vec<(usize, Vec<DeviceSpec>)> = Vec::new();
    for (i, mut spec) in devices.into_iter().enumerate() {
        let what = format!("devices[{i}]");
        validate_spec(&spec, &what, false)?;
        let timeline = Timeline::build(&spec.defaults, &spec.timeline, looping, &what)?;
        if let Some(mig) = spec.mig.as_mut() {
            let inst = std::mem::take(&mut mig.instances);
            if let Some(max) = mig.max_devices {
                if (inst.len() as u64) > u64::from(max) {
                    return Err(format!("{what}: more mig instances than max_devices"));
                }
            }
            pending_mig.push((i, inst));
        }
        all.push(Dev {
            spec,
            timeline,
            phys_index: i,
            parent: None,
            mig_children: Vec::new(),
        });
    }
    for (parent, inst) in pending_mig {
        for (j, spec) in inst.into_iter().enumerate() {
            let what = format!("devices[{parent}].mig.instances[{j}]");
            validate_spec(&spec, &what, true)?;
            let timeline = Timeline::build(&spec.defaults, &spec.timeline, looping, &what)?;
            let id = all.len();
            all.push(Dev {
                spec,
                timeline,
                phys_index: parent,
                parent: Some(parent),
                mig_children: Vec::new(),
            });
            all[parent].mig_children.push(id);
        }
    }
    // unique UUIDs
    let mut seen = std::collections::HashSet::new();
    for d in &all {
        if let Some(u) = &d.spec.uuid {
            if !seen.insert(u.clone()) {
                return Err(format!("uuid {u:?} appears twice"));
            }
        }
    }
    for (i, f) in scenario.faults.iter().enumerate() {
        let what = format!("faults[{i}]");
        check_call_name(&f.call, &what, true)?;
        if let Some(d) = f.device {
            if d >= physical_count {
                return Err(format!("{what}: device {d} does not exist"));
            }
        }
        if let Some(b) = f.block_s {
            if !b.is_finite() || b < 0.0 {
                return Err(format!("{what}: block_s must be >= 0"));
            }
        }
        if f.code.is_none() && f.block_s.is_none() {
            return Err(format!("{what}: needs code, block_s or both"));
        }
    }
    for (i, ev) in scenario.events.iter().enumerate() {
        let what = format!("events[{i}]");
        ev.kind.bits().map_err(|e| format!("{what}: {e}"))?;
        if ev.device >= physical_count {
            return Err(format!("{what}: device {} does not exist", ev.device));
        }
    }
    Ok(Parsed {
        scenario,
        all,
        physical_count,
    })
}

fn validate_spec(spec: &DeviceSpec, what: &str, is_mig: bool) -> Result<(), String> {
    for name in &spec.unsupported {
        check_call_name(name, &format!("{what}.unsupported"), false)?;
    }
    for name in spec.errors.keys() {
        check_call_name(name, &format!("{what}.errors"), false)?;
    }
    for name in spec.latency_us.keys() {
        check_call_name(name, &format!("{what}.latency_us"), false)?;
    }
    if spec.defaults.contains_key("t") {
        return Err(format!("{what}.defaults: t belongs in each row"));
    }
    if let Some(bus) = &spec.pci_bus_id {
        parse_bus_id(bus).ok_or_else(|| format!("{what}: bad pci_bus_id {bus:?}"))?;
    }
    if is_mig {
        if spec.mig.is_some() {
            return Err(format!("{what}: a MIG device cannot hold MIG devices"));
        }
        match &spec.uuid {
            Some(u) if u.starts_with("MIG-") => {}
            _ => {
                return Err(format!(
                    "{what}: a MIG device needs a uuid starting with \"MIG-\""
                ))
            }
        }
        if spec.gpu_instance_id.is_none() || spec.compute_instance_id.is_none() {
            return Err(format!(
                "{what}: a MIG device needs gpu_instance_id and compute_instance_id"
            ));
        }
    } else if spec.gpu_instance_id.is_some() || spec.compute_instance_id.is_some() {
        return Err(format!(
            "{what}: gpu_instance_id/compute_instance_id belong to MIG devices only"
        ));
    }
    if let Some(p) = spec.process_util_period_s {
        if !p.is_finite() || p <= 0.0 {
            return Err(format!("{what}: process_util_period_s must be > 0"));
        }
    }
    Ok(())
}

/// "00000000:19:00.0" -> (domain, bus, device)
pub fn parse_bus_id(s: &str) -> Option<(u32, u32, u32)> {
    let (domain, rest) = s.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (dev, func) = rest.split_once('.')?;
    func.parse::<u32>().ok()?;
    Some((
        u32::from_str_radix(domain, 16).ok()?,
        u32::from_str_radix(bus, 16).ok()?,
        u32::from_str_radix(dev, 16).ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOOPED: &str = r#"{"loop": true, "devices": [{"uuid": "GPU-x",
        "defaults": {"power_mw": 100},
        "timeline": [
            {"t": 0, "energy_mj": 1000, "ecc_corrected": 0, "gpm": {"graphics_util": 10}},
            {"t": 1, "energy_mj": 1500, "ecc_corrected": 1, "gpm": {"graphics_util": 30}},
            {"t": 2, "energy_mj": 2000, "ecc_corrected": 2, "power_mw": null, "gpm": {"graphics_util": 20}}
        ]}]}"#;

    #[test]
    fn linear_counters_grow_between_rows_and_step_down_at_a_reset() {
        let p = parse(
            r#"{"devices": [{"uuid": "GPU-x", "linear_counters": true, "timeline": [
                {"t": 0, "energy_mj": 1000}, {"t": 2, "energy_mj": 3000},
                {"t": 3, "energy_mj": 100}, {"t": 4, "energy_mj": 600}]}]}"#,
        )
        .unwrap();
        let tl = &p.all[0].timeline;
        let e = |t: f64| tl.counter_linear(Counter::Energy, t).unwrap();
        assert_eq!(e(0.0), 1000);
        assert_eq!(e(0.5), 1500);
        assert_eq!(e(1.9), 2900);
        assert_eq!(e(2.5), 3000, "the next row is a reset: no ramp down");
        assert_eq!(e(3.5), 350);
        assert_eq!(e(9.0), 600, "after the last row it holds");
    }

    #[test]
    fn rows_defaults_and_loop() {
        let p = parse(LOOPED).unwrap();
        let tl = &p.all[0].timeline;
        assert_eq!(tl.period, Some(3.0));
        let at = |e: f64| tl.at(e).map(|(r, w)| (r.t, w)).unwrap();
        assert_eq!(at(0.0), (0.0, 0));
        assert_eq!(at(0.99), (0.0, 0));
        assert_eq!(at(1.0), (1.0, 0));
        assert_eq!(at(2.5), (2.0, 0));
        assert_eq!(at(3.0), (0.0, 1));
        assert_eq!(at(7.5), (1.0, 2));
        // defaults fill absent fields; an explicit null removes them
        assert_eq!(tl.rows[0].power_mw, Some(100));
        assert_eq!(tl.rows[2].power_mw, None);
        // counters grow by (last - first) per wrap
        let energy = |e: f64| {
            let (r, w) = tl.at(e).unwrap();
            tl.counter(Counter::Energy, r, w).unwrap()
        };
        assert_eq!(energy(0.0), 1000);
        assert_eq!(energy(2.9), 2000);
        assert_eq!(energy(3.0), 2000);
        assert_eq!(energy(4.0), 2500);
        assert_eq!(energy(6.0), 3000);
        let mut last = 0;
        for i in 0..1000 {
            let v = energy(f64::from(i) * 0.037);
            assert!(v >= last);
            last = v;
        }
    }

    #[test]
    fn not_looping_holds_the_last_row() {
        let p = parse(&LOOPED.replace(r#""loop": true"#, r#""loop": false"#)).unwrap();
        let tl = &p.all[0].timeline;
        assert_eq!(tl.period, None);
        assert_eq!(tl.at(100.0).unwrap().0.t, 2.0);
        assert_eq!(tl.at(100.0).unwrap().1, 0);
    }

    #[test]
    fn gpm_mean_is_time_weighted() {
        let p = parse(LOOPED).unwrap();
        let d = &p.all[0];
        let m = |a, b| crate::gpm::mean(d, 1, a, b).unwrap();
        assert_eq!(m(0.0, 1.0), 10.0);
        assert_eq!(m(0.5, 1.5), 20.0);
        assert_eq!(m(0.0, 3.0), 20.0);
        assert!((m(0.0, 6.0) - 20.0).abs() < 1e-9);
        assert_eq!(m(1.5, 1.5), 30.0);
        assert_eq!(
            crate::gpm::mean(d, 2, 0.0, 1.0),
            Err(crate::rc::NOT_SUPPORTED)
        );
    }

    #[test]
    fn validation_errors_name_the_place() {
        let bad = [
            (
                r#"{"devices": [{"timeline": [{"t": 1}, {"t": 0}]}]}"#,
                "backwards",
            ),
            (
                r#"{"devices": [{"timeline": [{"t": 0, "processes": [[1]]}]}]}"#,
                "processes",
            ),
            (r#"{"devices": [{"errors": {"nvmlFoo": 2}}]}"#, "nvmlFoo"),
            (
                r#"{"devices": [], "faults": [{"call": "*", "device": 0, "code": 15}]}"#,
                "device 0",
            ),
            (
                r#"{"devices": [{"mig": {"current": 1, "instances": [{"uuid": "GPU-1", "gpu_instance_id": 1, "compute_instance_id": 0}]}}]}"#,
                "MIG-",
            ),
            (
                r#"{"devices": [{"timeline": [{"t": 0, "gpm": {"bogus": 1}}]}]}"#,
                "bogus",
            ),
            (r#"{"devices": [{"uuid": "a"}, {"uuid": "a"}]}"#, "twice"),
            (
                r#"{"devices": [], "events": [{"t": 1, "type": "boom"}]}"#,
                "boom",
            ),
        ];
        for (text, want) in bad {
            let err = parse(text)
                .err()
                .unwrap_or_else(|| panic!("accepted {text}"));
            assert!(err.contains(want), "{err:?} should mention {want:?}");
        }
    }
}
