//! Device events (XID, ECC) as OTel events: the event name, severity and a body that says
//! what the XID usually means and what to do, from the XID table
//! ([`crate::catalogue::xid`]). Pure functions; the [`Recorder`](crate::telemetry::logs::device_events::Recorder)
//! emits them.

use opentelemetry::logs::Severity;
use opentelemetry::KeyValue;

use crate::catalogue::attributes::MemoryErrorType;
use crate::catalogue::events;
use crate::catalogue::metrics::info_attributes;
use crate::catalogue::xid;
use crate::sampling::{DeviceEvent, DeviceEventKind};
use crate::telemetry::logs::events::Event;

/// `event.name` of an XID event ([`events::XID`]).
pub const XID_EVENT: &str = events::XID.name;
/// `event.name` of an ECC error event ([`events::ECC`]).
pub const ECC_EVENT: &str = events::ECC.name;
/// Attribute carrying the XID code (int), on the event and on `nvidia.gpu.xid.errors`.
pub use crate::catalogue::attributes::XID_CODE;

/// The OTel event for a device event.
pub fn to_event(e: &DeviceEvent) -> Event {
    let mut attributes = info_attributes(&e.device);
    let device = match &e.device.name {
        Some(name) => format!("{} ({name})", e.device.uuid),
        None => e.device.uuid.clone(),
    };
    let (name, severity, body) = match e.kind {
        DeviceEventKind::Xid(code) => {
            attributes.push(KeyValue::new(XID_CODE, code as i64));
            (
                XID_EVENT,
                xid::severity(code),
                format!("XID {code} on {device}: {}.", xid::text(code)),
            )
        }
        DeviceEventKind::EccDoubleBit => {
            attributes.push(MemoryErrorType::Uncorrected.kv());
            (
                ECC_EVENT,
                Severity::Error,
                format!(
                    "Double-bit (uncorrectable) ECC error on {device}: {}.",
                    xid::lookup(xid::DOUBLE_BIT_ECC).map_or("", |x| x.action)
                ),
            )
        }
        DeviceEventKind::EccSingleBit => {
            attributes.push(MemoryErrorType::Corrected.kv());
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
    fn a_double_bit_ecc_error_gives_xid_48_s_advice() {
        let e = to_event(&DeviceEvent {
            time: SystemTime::UNIX_EPOCH,
            device: Arc::new(DeviceInfo {
                uuid: "GPU-x".into(),
                ..DeviceInfo::default()
            }),
            kind: DeviceEventKind::EccDoubleBit,
        });
        let action = xid::lookup(48).unwrap().action;
        assert_eq!(
            e.body,
            format!("Double-bit (uncorrectable) ECC error on GPU-x: {action}.")
        );
        assert_eq!(e.severity, Severity::Error);
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
