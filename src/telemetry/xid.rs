//! Device events (XID, ECC) as OTel events: the event name, severity and a body that says
//! what the XID usually means and what to do, from NVIDIA's XID catalogue
//! (<https://docs.nvidia.com/deploy/xid-errors/>). Pure functions; the
//! [`Recorder`](super::recorder::Recorder) emits them.

use opentelemetry::logs::Severity;
use opentelemetry::KeyValue;

use super::catalogue::info_attributes;
use super::events::Event;
use crate::sampling::{DeviceEvent, DeviceEventKind};

/// `event.name` of an XID event.
pub const XID_EVENT: &str = "nvidia.gpu.xid";
/// `event.name` of an ECC error event.
pub const ECC_EVENT: &str = "nvidia.gpu.ecc";
/// Attribute carrying the XID code (int), on the event and on `nvidia.gpu.xid.errors`.
pub const XID_CODE: &str = "nvidia.gpu.xid.code";

/// XIDs an SRE meets on datacenter GPUs: code, severity, usual meaning, what to do.
pub const KNOWN_XIDS: &[(u64, Severity, &str, &str)] = &[
    (13, Severity::Warn, "graphics engine exception", "usually an application error (out-of-range access, illegal instruction); check the application before the GPU"),
    (31, Severity::Warn, "GPU memory page fault", "usually an application error (illegal address); check the application before the GPU"),
    (43, Severity::Warn, "GPU stopped processing", "an application hit a fault and its context was reset; the GPU itself is usually healthy"),
    (45, Severity::Warn, "preemptive cleanup after earlier errors", "processes were stopped after another error; look at the XID before it"),
    (48, Severity::Error, "double-bit ECC error", "an uncorrectable memory error; the affected application was stopped; reset the GPU so the row is remapped"),
    (61, Severity::Error, "internal micro-controller breakpoint or warning", "reset the GPU if it recurs"),
    (62, Severity::Error, "internal micro-controller halt", "reset the GPU; replace it if it recurs"),
    (63, Severity::Warn, "ECC page retirement or row remapping recorded", "a faulty memory row was marked for remapping; it takes effect at the next GPU reset"),
    (64, Severity::Error, "ECC page retirement or row remapping failed", "the faulty row could not be remapped; reset the GPU, replace it if it recurs"),
    (74, Severity::Error, "NVLink error", "a link between GPUs failed; check the NVLink/NVSwitch fabric and reset the GPU"),
    (79, Severity::Fatal, "GPU has fallen off the bus", "the GPU is unreachable; drain the node and reset or reboot; replace the GPU if it recurs"),
    (92, Severity::Warn, "high single-bit ECC error rate", "memory is degrading; plan a GPU reset or replacement"),
    (94, Severity::Error, "contained ECC error", "an uncorrectable memory error was contained to the applications using it, which were stopped; others go on; reset the GPU when possible"),
    (95, Severity::Fatal, "uncontained ECC error", "an uncorrectable memory error affected every application on the GPU; reset the GPU"),
    (119, Severity::Error, "GSP RPC timeout", "the GPU firmware stopped answering; reset the GPU"),
    (120, Severity::Error, "GSP error", "the GPU firmware reported an error; reset the GPU"),
];

/// Severity and body text of an XID.
pub fn describe(code: u64) -> (Severity, String) {
    match KNOWN_XIDS.iter().find(|(c, ..)| *c == code) {
        Some((_, severity, meaning, action)) => (*severity, format!("{meaning}: {action}")),
        None => (
            Severity::Warn,
            "see NVIDIA's XID catalogue (docs.nvidia.com/deploy/xid-errors) for its meaning".into(),
        ),
    }
}

/// The OTel event for a device event.
pub fn to_event(e: &DeviceEvent) -> Event {
    let mut attributes = info_attributes(&e.device);
    let device = match &e.device.name {
        Some(name) => format!("{} ({name})", e.device.uuid),
        None => e.device.uuid.clone(),
    };
    let (name, severity, body) = match e.kind {
        DeviceEventKind::Xid(code) => {
            let (severity, text) = describe(code);
            attributes.push(KeyValue::new(XID_CODE, code as i64));
            (
                XID_EVENT,
                severity,
                format!("XID {code} on {device}: {text}."),
            )
        }
        DeviceEventKind::EccDoubleBit => {
            attributes.push(KeyValue::new("error.type", "uncorrected"));
            (
                ECC_EVENT,
                Severity::Error,
                format!("Double-bit (uncorrectable) ECC error on {device}: the application using the memory was stopped; reset the GPU so the row is remapped."),
            )
        }
        DeviceEventKind::EccSingleBit => {
            attributes.push(KeyValue::new("error.type", "corrected"));
            (
                ECC_EVENT,
                Severity::Info,
                format!("Single-bit (corrected) ECC error on {device}: no data was lost; many of them mean failing memory."),
            )
        }
    };
    Event {
        name,
        severity,
        body,
        attributes,
        time: Some(e.time),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::SystemTime;

    use super::*;
    use crate::sampling::{DeviceInfo, MigPlacement};

    fn attr(e: &Event, key: &str) -> Option<String> {
        e.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.to_string())
    }

    #[test]
    fn the_usual_xids_are_named() {
        for (code, words) in [
            (79, "fallen off the bus"),
            (48, "double-bit ECC"),
            (63, "row remapping"),
            (64, "remapping failed"),
            (74, "NVLink"),
            (94, "contained ECC"),
            (95, "uncontained ECC"),
        ] {
            let (_, body) = describe(code);
            assert!(body.contains(words), "XID {code}: {body}");
        }
        assert_eq!(describe(79).0, Severity::Fatal);
        assert_eq!(describe(13).0, Severity::Warn);
        assert!(describe(12345).1.contains("XID catalogue"));
    }

    #[test]
    fn an_xid_in_a_mig_instance_names_the_mig_device_and_its_parent() {
        let device = Arc::new(DeviceInfo {
            uuid: "MIG-5e6f7a8b-9c0d-5e1f-8a2b-3c4d5e6f7a80".into(),
            name: Some("NVIDIA H200 MIG 3g.71gb".into()),
            mig: Some(MigPlacement {
                parent_uuid: "GPU-0c1d2e3f-4a5b-4c6d-8e7f-90a1b2c3d4e5".into(),
                mig_index: 0,
                gpu_instance_id: Some(1),
                compute_instance_id: Some(0),
            }),
            ..DeviceInfo::default()
        });
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
        let e = to_event(&DeviceEvent {
            time: at,
            device,
            kind: DeviceEventKind::Xid(13),
        });
        assert_eq!(e.name, "nvidia.gpu.xid");
        assert_eq!(e.time, Some(at));
        assert_eq!(attr(&e, "nvidia.gpu.xid.code").as_deref(), Some("13"));
        assert_eq!(
            attr(&e, "hw.parent").as_deref(),
            Some("GPU-0c1d2e3f-4a5b-4c6d-8e7f-90a1b2c3d4e5")
        );
        assert!(e.body.starts_with("XID 13 on MIG-5e6f7a8b-9c0d-5e1f-8a2b-3c4d5e6f7a80 (NVIDIA H200 MIG 3g.71gb): graphics engine exception"), "{}", e.body);
    }
}
