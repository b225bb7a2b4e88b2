use std::time::{Duration, UNIX_EPOCH};

use super::*;

#[test]
fn an_event_is_one_otlp_log_record() {
    let at = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let now = at + Duration::from_millis(3);
    let r = log_record(
        Event {
            name: "nvidia.gpu.xid",
            severity: Severity::Error,
            body: "XID 79 on GPU-a".into(),
            attributes: vec![
                KeyValue::new("hw.id", "GPU-a"),
                KeyValue::new("nvidia.gpu.xid.code", 79),
            ],
            time: Some(at),
        },
        now,
    );
    assert_eq!(r.event_name, "nvidia.gpu.xid");
    assert_eq!((r.severity_number, r.severity_text.as_str()), (17, "ERROR"));
    assert_eq!(r.time_unix_nano, 1_800_000_000_000_000_000);
    assert_eq!(r.observed_time_unix_nano, 1_800_000_000_003_000_000);
    assert_eq!(
        r.body.and_then(|b| b.value),
        Some(any_value::Value::StringValue("XID 79 on GPU-a".into()))
    );
    let code = r
        .attributes
        .iter()
        .find(|kv| kv.key == "nvidia.gpu.xid.code")
        .and_then(|kv| kv.value.clone())
        .and_then(|v| v.value);
    assert_eq!(code, Some(any_value::Value::IntValue(79)));
    // An event without a time is stamped with its observation.
    let r = log_record(
        Event {
            name: "gpu.run.report",
            severity: Severity::Info,
            body: String::new(),
            attributes: Vec::new(),
            time: None,
        },
        now,
    );
    assert_eq!(r.time_unix_nano, r.observed_time_unix_nano);
}

/// Disabled (`OTEL_LOGS_EXPORTER=none`): emitting is a no-op, shutdown returns at once.
#[test]
fn a_disabled_pipeline_takes_nothing() {
    let events = Events::disabled();
    events.emit(Event {
        name: "nvidia.gpu.xid",
        severity: Severity::Error,
        body: String::new(),
        attributes: Vec::new(),
        time: None,
    });
    assert_eq!(events.queued(), 0);
    assert!(events.shutdown(Duration::ZERO));
}
