//! The reads of one tick for one device: the fast group every tick ([`sample_fast`]) and
//! the slow groups due ([`read_slow`]).

use super::*;

/// NVML field id of the HBM temperature (`NVML_FI_DEV_MEMORY_TEMP`).
const NVML_FI_DEV_MEMORY_TEMP: u32 = 82;

/// The fields read every tick. A lost device is probed with one cheap call per tick to
/// notice its return.
pub(super) fn sample_fast(
    gate: &mut Gate,
    nvml: &Nvml,
    layout: ProcessInfoLayout,
    proc_root: Option<&Path>,
    slot: usize,
    sel: &mut Selected<'_>,
) -> DeviceSample {
    let dev = &sel.device;
    let info = sel.info.clone();
    let index = info.index;
    let uuid = info.uuid.as_str();
    let was_lost = sel.lost;
    let mut lost = false;
    let memory = gate.read_versioned(
        slot,
        &info,
        Reading::Memory,
        Versioned::MemoryInfo,
        &mut lost,
        |k| raw::memory_info(nvml, dev, k),
    );
    if lost {
        if !was_lost {
            tracing::error!(gpu = index, uuid, "GPU is lost (fallen off the bus or needs a reset); it is reported as failed, the other GPUs go on");
        }
        sel.lost = true;
        sel.drop_carried();
        return DeviceSample::empty(info, DeviceState::Lost);
    }
    if was_lost {
        tracing::info!(gpu = index, uuid, "GPU answers again");
        sel.lost = false;
    }
    let mut s = DeviceSample::empty(info.clone(), DeviceState::Ok);
    if let Some(m) = memory {
        s.memory_total_bytes = Some(m.total);
        s.memory_used_bytes = Some(m.used);
        s.memory_free_bytes = Some(m.free);
        s.memory_reserved_bytes = m.reserved;
    }
    macro_rules! read {
        ($field:expr, $call:expr) => {
            gate.read(slot, &info, $field, &mut lost, || $call)
        };
    }
    if sel.is_gpu() {
        if let Some(u) = read!(Reading::Utilization, dev.utilization_rates()) {
            s.utilization_gpu_percent = Some(u.gpu);
            s.utilization_memory_controller_percent = Some(u.memory);
        }
        s.utilization_encoder_percent =
            read!(Reading::EncoderUtilization, dev.encoder_utilization()).map(|u| u.utilization);
        s.utilization_decoder_percent =
            read!(Reading::DecoderUtilization, dev.decoder_utilization()).map(|u| u.utilization);
        s.temperature_gpu_celsius = read!(
            Reading::TemperatureGpu,
            dev.temperature(TemperatureSensor::Gpu)
        );
        s.temperature_memory_celsius = read!(Reading::TemperatureMemory, memory_temperature(dev))
            .and_then(|c| gate.admit(slot, &info, &bounds::TEMPERATURE_MEMORY, c))
            .map(|c| c.round() as u32);
        s.power_milliwatts = read!(Reading::Power, dev.power_usage());
        s.power_limit_milliwatts = read!(Reading::PowerLimit, dev.enforced_power_limit());
        s.clock_graphics_mhz = read!(Reading::ClockGraphics, dev.clock_info(Clock::Graphics));
        s.clock_sm_mhz = read!(Reading::ClockSm, dev.clock_info(Clock::SM));
        s.clock_memory_mhz = read!(Reading::ClockMemory, dev.clock_info(Clock::Memory));
        s.clocks_event_reasons = gate.read_versioned(
            slot,
            &info,
            Reading::ClocksEventReasons,
            Versioned::ClocksEventReasons,
            &mut lost,
            |k| raw::clocks_event_reasons(nvml, dev, k),
        );
        s.performance_state = read!(Reading::PerformanceState, dev.performance_state())
            .map(|p| p.as_c())
            // NVML_PSTATE_UNKNOWN (32) is no state: absent, not 32.
            .filter(|p| *p <= 15);
        s.ecc_corrected_total = read!(
            Reading::EccCorrected,
            dev.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)
        );
        s.ecc_uncorrected_total = read!(
            Reading::EccUncorrected,
            dev.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
        );
        s.remapped_rows = read!(Reading::RemappedRows, raw::remapped_rows(nvml, dev));
    }
    if sel.reports_processes() {
        sel.processes = gate.read_versioned(
            slot,
            &info,
            Reading::Processes,
            Versioned::ComputeProcesses,
            &mut lost,
            |k| raw::process_list(nvml, dev, ProcessList::Compute, k, layout),
        );
        if sel.mps_every_tick {
            // Node mode: MPS clients are processes of their pods too (the compute list may
            // show only the MPS server). A PID in both keeps its compute entry.
            let clients = gate.read_versioned(
                slot,
                &info,
                Reading::MpsProcesses,
                Versioned::MpsComputeProcesses,
                &mut lost,
                |k| raw::process_list(nvml, dev, ProcessList::Mps, k, layout),
            );
            if let Some(clients) = clients {
                sel.mps_seen |= !clients.is_empty();
                if let Some(list) = &mut sel.processes {
                    for c in clients {
                        if !list.iter().any(|p| p.pid == c.pid) {
                            list.push(c);
                        }
                    }
                }
            }
        }
        let current: HashSet<u32> = sel.processes.iter().flatten().map(|p| p.pid).collect();
        sel.names.retain(|pid, _| current.contains(pid));
        for pid in current {
            sel.names.entry(pid).or_insert_with(|| {
                proc_root.and_then(|root| processes::executable_name(root, pid))
            });
        }
    }
    if lost {
        tracing::error!(gpu = index, uuid, "GPU is lost (fallen off the bus or needs a reset); it is reported as failed, the other GPUs go on");
        sel.lost = true;
        sel.drop_carried();
        return DeviceSample::empty(info, DeviceState::Lost);
    }
    s
}

/// Whether and how the device is shared, from the kubelet's listing and the MPS clients
/// seen so far; the first time it is, one warning says so.
pub(super) fn sharing(sel: &mut Selected<'_>) -> Option<Sharing> {
    let mode = if sel.mps_seen {
        Sharing::Mps
    } else if sel.kubelet_shared {
        Sharing::TimeSlicing
    } else {
        return None;
    };
    if !sel.sharing_said && sel.mps_every_tick {
        // Node mode: the readings are on the node's resource, each pod's share on its own.
        sel.sharing_said = true;
        tracing::info!(
            gpu = sel.info.index,
            uuid = %sel.info.uuid,
            "MPS clients run on this GPU: it is marked nvidia.gpu.sharing=mps, and each client's pod gets its share"
        );
    }
    if !sel.sharing_said {
        sel.sharing_said = true;
        let why = match mode {
            Sharing::TimeSlicing => "the kubelet lists it as one replica of a time-sliced GPU",
            Sharing::Mps => "MPS clients run on it",
        };
        tracing::warn!(
            gpu = sel.info.index,
            uuid = %sel.info.uuid,
            sharing = mode.as_str(),
            "this GPU is shared with other pods ({why}): its readings are the whole GPU's, every process on it included, other pods' too; they are reported under this pod's attributes, marked nvidia.gpu.sharing={}",
            mode.as_str()
        );
    }
    Some(mode)
}

/// Reads one slow group for one device; returns whether an NVML call was made.
pub(super) fn read_slow<'n>(
    group: SampleGroup,
    gate: &mut Gate,
    nvml: &'n Nvml,
    layout: ProcessInfoLayout,
    slot: usize,
    d: &mut Selected<'n>,
    lost: &mut bool,
) -> bool {
    let info = d.info.clone();
    match group {
        SampleGroup::Energy if d.is_gpu() => {
            let dev = &d.device;
            d.fresh.energy_millijoules = gate.read(slot, &info, Reading::Energy, lost, || {
                dev.total_energy_consumption()
            });
            true
        }
        SampleGroup::Process if d.reports_processes() => {
            let dev = &d.device;
            let seen = d.process_utilization_seen_us;
            let samples = gate.read(slot, &info, Reading::ProcessUtilization, lost, || {
                // NOT_FOUND: no sample since `seen`, i.e. no process ran in the window.
                match dev.process_utilization_stats(seen) {
                    Err(NvmlError::NotFound) => Ok(Vec::new()),
                    other => other,
                }
            });
            // No sample at all since the last read (NOT_FOUND, or a window shorter than
            // NVML's sampling period): nothing is known for this window, not "all idle"; the
            // window goes on to the next read.
            if let Some(samples) = samples.filter(|s| !s.is_empty()) {
                if let Some(latest) = samples.iter().map(|s| s.timestamp).max() {
                    d.process_utilization_seen_us = latest;
                }
                d.fresh.process_utilization = Some(processes::average(&samples));
            }
            if !d.mps_seen && !d.mps_every_tick {
                // MPS clients on the device: it is shared (until NVML is initialized again).
                let dev = &d.device;
                d.mps_seen = gate
                    .read_versioned(
                        slot,
                        &info,
                        Reading::MpsProcesses,
                        Versioned::MpsComputeProcesses,
                        lost,
                        |k| raw::process_list(nvml, dev, ProcessList::Mps, k, layout),
                    )
                    .is_some_and(|clients| !clients.is_empty());
            }
            true
        }
        SampleGroup::Gpm => {
            let Selected {
                device,
                role,
                gpm: Some(state),
                ..
            } = &mut *d
            else {
                return false;
            };
            let reading = match role {
                Role::Gpu { .. } => gate.read(slot, &info, Reading::Gpm, lost, || {
                    state.read(nvml, || device.gpm_sample())
                }),
                Role::Mig {
                    parent,
                    gpu_instance_id: Some(gi),
                } => {
                    let gi = *gi;
                    gate.read(slot, &info, Reading::Gpm, lost, || {
                        state.read(nvml, || parent.gpm_mig_sample(gi))
                    })
                }
                Role::Mig { .. } => return false,
            };
            match reading {
                Some(Some(r)) => {
                    let window = r.metrics.window_seconds;
                    // An impossible rate is left out, not added to the byte totals.
                    let mut rate = |bound: &'static bounds::Bound, mib_s: Option<f64>| {
                        mib_s.and_then(|v| gate.admit(slot, &info, bound, v))
                    };
                    let (pcie_tx, pcie_rx, nvlink_tx, nvlink_rx) = (
                        rate(&bounds::GPM_PCIE, r.pcie_tx_mib_s),
                        rate(&bounds::GPM_PCIE, r.pcie_rx_mib_s),
                        rate(&bounds::GPM_NVLINK, r.nvlink_tx_mib_s),
                        rate(&bounds::GPM_NVLINK, r.nvlink_rx_mib_s),
                    );
                    let add =
                        |total: &mut Option<f64>, now: &mut Option<f64>, mib_s: Option<f64>| {
                            if let Some(rate) = mib_s {
                                *total = Some(total.unwrap_or(0.0) + rate * MIB * window);
                                *now = *total;
                            }
                        };
                    // The window ends at the sample just taken.
                    let end = Instant::now();
                    let start = end
                        .checked_sub(Duration::from_secs_f64(window.max(0.0)))
                        .unwrap_or(end);
                    d.count_pcie(
                        start,
                        end,
                        pcie_tx.map(|m| m * MIB),
                        pcie_rx.map(|m| m * MIB),
                    );
                    let (io, fresh) = (&mut d.io, &mut d.fresh.io);
                    add(
                        &mut io.nvlink_transmit_bytes,
                        &mut fresh.nvlink_transmit_bytes,
                        nvlink_tx,
                    );
                    add(
                        &mut io.nvlink_receive_bytes,
                        &mut fresh.nvlink_receive_bytes,
                        nvlink_rx,
                    );
                    d.gpm_pcie = Some(r.pcie_tx_mib_s.is_some() || r.pcie_rx_mib_s.is_some());
                    if !r.unanswered.is_empty() && !d.gpm_unanswered_said {
                        d.gpm_unanswered_said = true;
                        tracing::info!(gpu = info.index, uuid = %info.uuid, unanswered = %super::super::gpm::nvml_names(&r.unanswered), "GPM does not answer these metrics on this device; they are absent");
                    }
                    d.fresh.gpm = Some(r.metrics);
                }
                Some(None) => {} // first sample: no window yet
                None => {
                    if gate.is_unsupported(slot, Reading::Gpm) {
                        d.gpm = None; // frees the held sample
                    }
                }
            }
            true
        }
        SampleGroup::Pcie if d.is_gpu() && (d.gpm.is_none() || d.gpm_pcie == Some(false)) => {
            let dev = &d.device;
            let rates = gate.read(slot, &info, Reading::PcieThroughput, lost, || {
                Ok((
                    dev.pcie_throughput(PcieUtilCounter::Send)?,
                    dev.pcie_throughput(PcieUtilCounter::Receive)?,
                ))
            });
            let rates = rates.filter(|(tx, rx)| {
                // Both or neither: an interval needs both ends of both directions.
                let tx_ok = gate.admit(slot, &info, &bounds::PCIE_THROUGHPUT, f64::from(*tx));
                let rx_ok = gate.admit(slot, &info, &bounds::PCIE_THROUGHPUT, f64::from(*rx));
                tx_ok.is_some() && rx_ok.is_some()
            });
            if let Some((tx, rx)) = rates {
                let now = Instant::now();
                if let Some((then, tx0, rx0)) = d.pcie_previous {
                    // KB/s (1024 bytes) sampled over ~20 ms: the mean of the two readings
                    // times the time between them (less what GPM already counted) is an
                    // estimate, not a count.
                    let rate = |a: u32, b: u32| (f64::from(a) + f64::from(b)) / 2.0 * BYTES_PER_KIB;
                    d.count_pcie(then, now, Some(rate(tx0, tx)), Some(rate(rx0, rx)));
                }
                d.pcie_previous = Some((now, tx, rx));
            }
            true
        }
        _ => false,
    }
}

/// One line for a GPU that cannot be listed (no handle or no UUID, so no `hw.id` to report
/// it under), naming the cause and the fix when it is a known one.
pub(super) fn log_unlisted(index: u32, call: &str, e: &NvmlError) {
    match e {
        NvmlError::GpuLost | NvmlError::ResetRequired => tracing::error!(
            gpu = index,
            call,
            "this GPU cannot be reported: {}",
            crate::sampling::NvmlDown::classify(e).explain()
        ),
        _ => tracing::error!(gpu = index, call, error = %e, "cannot list this GPU; it is skipped"),
    }
}

/// HBM temperature (°C) through the field-values API, as the driver gave it (a sentinel
/// such as -1 or 255 included: [`bounds`] judges it); the per-field return code is the
/// answer.
#[allow(clippy::cast_precision_loss)]
fn memory_temperature(dev: &Device<'_>) -> Result<f64, NvmlError> {
    let mut values = dev.field_values_for(&[FieldId(NVML_FI_DEV_MEMORY_TEMP)])?;
    let sample = values.pop().ok_or(NvmlError::NotSupported)??;
    Ok(match sample.value? {
        SampleValue::U32(v) => f64::from(v),
        SampleValue::U64(v) => v as f64,
        SampleValue::I64(v) => v as f64,
        SampleValue::F64(v) => v,
    })
}
