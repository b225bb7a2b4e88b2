//! Per-process helpers: averaging NVML's process-utilization samples, and naming a host PID
//! through `/proc` when that is safe.
//!
//! NVML reports host PIDs (the driver's PID namespace). A sidecar sees them as its own only
//! in the host PID namespace (`hostPID: true`); with `shareProcessNamespace` it sees the
//! pod's processes under pod PIDs, and otherwise only itself, so `/proc/<host pid>` there is
//! absent or, worse, another process. Names are therefore read only when the agent runs in
//! the host (initial) PID namespace, recognized by kernel threads being visible:
//! `/proc/2/comm` is `kthreadd` only there.

use std::collections::HashMap;
use std::path::Path;

use nvml_wrapper::struct_wrappers::device::ProcessUtilizationSample;

use super::snapshot::ProcessUtilization;

/// Whether `/proc` (under `proc_root`) shows the initial PID namespace: its PID 2 is the
/// kernel's `kthreadd`, which no container PID namespace contains.
pub(crate) fn in_host_pid_namespace(proc_root: &Path) -> bool {
    std::fs::read_to_string(proc_root.join("2/comm")).is_ok_and(|c| c.trim_end() == "kthreadd")
}

/// The executable name of `pid` (`/proc/<pid>/comm`, at most 15 bytes as the kernel keeps
/// it); `None` when the process is not visible.
pub(crate) fn executable_name(proc_root: &Path, pid: u32) -> Option<String> {
    let comm = std::fs::read_to_string(proc_root.join(pid.to_string()).join("comm")).ok()?;
    let name = comm.trim_end_matches('\n');
    (!name.is_empty()).then(|| name.to_string())
}

/// Mean of each process's samples (several when NVML buffered more than one since the last
/// read), percent.
pub(crate) fn average(samples: &[ProcessUtilizationSample]) -> HashMap<u32, ProcessUtilization> {
    let mut sums: HashMap<u32, (ProcessUtilization, u32)> = HashMap::new();
    for s in samples {
        let (sum, n) = sums.entry(s.pid).or_default();
        sum.sm_percent += f64::from(s.sm_util);
        sum.memory_percent += f64::from(s.mem_util);
        sum.encoder_percent += f64::from(s.enc_util);
        sum.decoder_percent += f64::from(s.dec_util);
        *n += 1;
    }
    sums.into_iter()
        .map(|(pid, (sum, n))| {
            let n = f64::from(n);
            (
                pid,
                ProcessUtilization {
                    sm_percent: sum.sm_percent / n,
                    memory_percent: sum.memory_percent / n,
                    encoder_percent: sum.encoder_percent / n,
                    decoder_percent: sum.decoder_percent / n,
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(pid: u32, ts: u64, sm: u32, mem: u32) -> ProcessUtilizationSample {
        ProcessUtilizationSample {
            pid,
            timestamp: ts,
            sm_util: sm,
            mem_util: mem,
            enc_util: 0,
            dec_util: 0,
        }
    }

    #[test]
    fn averages_per_pid() {
        // The recorded H200 sample (pid 432: sm 94, mem 22), twice, and another process.
        let avg = average(&[
            sample(432, 1, 94, 22),
            sample(432, 2, 90, 20),
            sample(9, 2, 5, 1),
        ]);
        assert_eq!(avg[&432].sm_percent, 92.0);
        assert_eq!(avg[&432].memory_percent, 21.0);
        assert_eq!(avg[&9].sm_percent, 5.0);
        assert_eq!(avg.len(), 2);
    }

    #[test]
    fn names_only_from_a_proc_that_shows_kthreadd() {
        let guard = tempfile::tempdir().unwrap();
        let dir = guard.path();
        std::fs::create_dir_all(dir.join("2")).unwrap();
        std::fs::create_dir_all(dir.join("432")).unwrap();
        std::fs::write(dir.join("432/comm"), "python3\n").unwrap();
        std::fs::write(dir.join("2/comm"), "sh\n").unwrap();
        assert!(
            !in_host_pid_namespace(dir),
            "a container's PID 2 is not kthreadd"
        );
        std::fs::write(dir.join("2/comm"), "kthreadd\n").unwrap();
        assert!(in_host_pid_namespace(dir));
        assert_eq!(executable_name(dir, 432).as_deref(), Some("python3"));
        assert_eq!(executable_name(dir, 433), None);
    }
}
