//! Every event the agent sends: one [`EventDef`] per `event.name` (or family of names), with
//! its severity, body and attributes. The device events (XID, ECC) are built by
//! [`crate::telemetry::logs::xid_event`], the run report by [`crate::report`], the alert family by
//! [`crate::rules`] (one name per row of `src/rules/catalogue.rs`). `docs/events.md` lists
//! them all in its first table ([`markdown_table`]), generated with the rule rows.

/// One event (an OTLP log record with an `event.name`) the agent sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventDef {
    /// `event.name` (for the alert family, the pattern: `nvidia.gpu.alert.<rule>`).
    pub name: &'static str,
    /// Its OTel severity (`SeverityText`), in words.
    pub severity: &'static str,
    /// What the body says.
    pub body: &'static str,
    /// The attributes it carries besides the device's.
    pub attributes: &'static str,
    /// When it is sent.
    pub when: &'static str,
}

/// An XID error reported by the NVML event watcher (`nvmlEventSetWait_v2`,
/// `nvmlEventTypeXidCriticalError`).
pub const XID: EventDef = EventDef {
    name: "nvidia.gpu.xid",
    severity: "by code: `FATAL`, `ERROR` or `WARN` as the XID table says ([Hints](#hints)); `WARN` for a code not in it",
    body: "`XID <code> on <hw.id> (<hw.model>): <meaning>: <what to do>.`",
    attributes: "the device's (`hw.id`, `hw.type`, `hw.vendor`, `hw.model`, `hw.parent` on a MIG device); `nvidia.gpu.xid.code` (int)",
    when: "each XID the NVML event watcher reports, at once (also counted in `nvidia.gpu.xid.errors`)",
};

/// An ECC error event from the NVML event watcher (`nvmlEventTypeDoubleBitEccError`,
/// `nvmlEventTypeSingleBitEccError`).
pub const ECC: EventDef = EventDef {
    name: "nvidia.gpu.ecc",
    severity: "`ERROR` for a double-bit (uncorrected) error, `INFO` for a single-bit (corrected) one",
    body: "`Double-bit (uncorrectable) ECC error on <hw.id>: <XID 48's advice>.` or `Single-bit (corrected) ECC error on <hw.id>: no data was lost; many of them mean failing memory.`",
    attributes: "the device's (as above); `error.type` = `uncorrected` | `corrected`",
    when: "each ECC error event the watcher reports, at once",
};

/// The run report, at shutdown ([`crate::report`]).
pub const RUN_REPORT: EventDef = EventDef {
    name: "gpu.run.report",
    severity: "`INFO`",
    body: "the run report's JSON document without its `events` list ([run-report.md](run-report.md#run-report))",
    attributes: "the pod summary as `gpu.run.<field>` (e.g. `gpu.run.energy_j`) and `gpu.run.gpu_count`",
    when: "once, when the agent stops, before the final flush",
};

/// The alert family: one `event.name` per rule ([Rules](#rules)).
pub const ALERT: EventDef = EventDef {
    name: "nvidia.gpu.alert.<rule>",
    severity: "firing: the rule's (`info`: `INFO`, `warning`: `WARN`, `critical`: `FATAL`); resolved: `INFO`",
    body: "firing: what was seen, for how long, then what to do (the rule's hint); resolved: what resolved after how long",
    attributes: "[every record's](#attributes-on-every-record) and the rule's own ([Rules](#rules))",
    when: "a rule's condition held for its duration (firing), then cleared for as long (resolved)",
};

/// One alert rule's event, as [`markdown_table`] lists it (from a row of the rule table).
#[derive(Debug, Clone, Copy)]
pub struct RuleEvent<'a> {
    /// `event.name`, `nvidia.gpu.alert.<rule>`.
    pub name: &'a str,
    /// `info`, `warning` or `critical`.
    pub severity: &'a str,
    /// The rule's own attributes.
    pub attributes: &'a str,
}

/// The events that are not alerts, in documentation order.
pub const DEVICE_AND_RUN_EVENTS: &[EventDef] = &[XID, ECC, RUN_REPORT];

/// The table of every event the agent sends, for `docs/events.md`: the events of
/// [`DEVICE_AND_RUN_EVENTS`], the [`ALERT`] family, then one row per rule.
pub fn markdown_table<'a>(rules: impl IntoIterator<Item = RuleEvent<'a>>) -> String {
    let cell = |t: &str| t.replace('|', "\\|");
    let mut s = String::from(
        "| `event.name` | severity | sent | body | attributes |\n| --- | --- | --- | --- | --- |\n",
    );
    for e in DEVICE_AND_RUN_EVENTS.iter().chain([&ALERT]) {
        s.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            e.name,
            cell(e.severity),
            cell(e.when),
            cell(e.body),
            cell(e.attributes)
        ));
    }
    for r in rules {
        s.push_str(&format!(
            "| `{}` | {} | its condition ([Rules](#rules)) | as `{}`, ending with its hint ([Hints](#hints)) | {} |\n",
            r.name,
            r.severity,
            ALERT.name,
            cell(r.attributes)
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_is_a_row() {
        let t = markdown_table([RuleEvent {
            name: "nvidia.gpu.alert.xid",
            severity: "critical",
            attributes: "`nvidia.gpu.xid.code`",
        }]);
        for name in ["nvidia.gpu.xid", "nvidia.gpu.ecc", "gpu.run.report"] {
            assert!(t.contains(&format!("| `{name}` |")), "{t}");
        }
        assert!(t.contains("| `nvidia.gpu.alert.xid` | critical |"), "{t}");
        assert_eq!(t.lines().count(), 2 + 4 + 1);
    }
}
