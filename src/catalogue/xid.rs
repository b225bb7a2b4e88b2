//! The XID table: every XID code the agent explains, with its severity, what it usually
//! means and what to do, after NVIDIA's XID catalogue
//! (<https://docs.nvidia.com/deploy/xid-errors/>) and its page-retirement and row-remapping
//! pages. The XID event's body ([`crate::telemetry::logs::xid_event`]) and the `xid` rule's alert body
//! ([`crate::rules`]) both take their text from [`text`], so one XID reads the same in
//! every record.

use opentelemetry::logs::Severity;

/// One XID code the agent explains.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Xid {
    /// The XID number (`nvmlEventData_t.eventData` of an `nvmlEventTypeXidCriticalError`).
    pub code: u64,
    /// Severity of the `nvidia.gpu.xid` event.
    pub severity: Severity,
    /// What the XID usually means, a noun phrase (NVIDIA's description, shortened).
    pub meaning: &'static str,
    /// What to do, following NVIDIA's resolution for the code.
    pub action: &'static str,
}

/// XIDs an SRE meets on datacenter GPUs, by code.
pub const XIDS: &[Xid] = &[
    Xid {
        code: 13,
        severity: Severity::Warn,
        meaning: "graphics engine exception",
        action: "usually an application error (an out-of-range access or illegal instruction in a kernel); check the job's own errors before the GPU",
    },
    Xid {
        code: 31,
        severity: Severity::Warn,
        meaning: "GPU memory page fault",
        action: "usually an application error (an illegal address); check the job's own errors before the GPU",
    },
    Xid {
        code: 43,
        severity: Severity::Warn,
        meaning: "GPU stopped processing",
        action: "an application hit a software fault and its context was stopped; the GPU itself is usually healthy",
    },
    Xid {
        code: 45,
        severity: Severity::Warn,
        meaning: "preemptive cleanup, due to previous errors",
        action: "the driver stopped a process's work because the process ended, was killed or hit an earlier error; nothing to do on its own: look at why the process stopped and at the XID reported before it",
    },
    Xid {
        code: 48,
        severity: Severity::Error,
        meaning: "double-bit ECC error",
        action: "an uncorrectable memory error; the applications using that memory were stopped and must restart; drain the node and reset the GPU so the row is remapped, replace it if it recurs",
    },
    Xid {
        code: 61,
        severity: Severity::Error,
        meaning: "internal micro-controller breakpoint or warning",
        action: "reset the GPU if it recurs",
    },
    Xid {
        code: 62,
        severity: Severity::Error,
        meaning: "internal micro-controller halt",
        action: "reset the GPU; replace it if it recurs",
    },
    Xid {
        code: 63,
        severity: Severity::Warn,
        meaning: "ECC page retirement or row remapping recorded",
        action: "a failing memory row was marked for remapping (its page retired, before Ampere); the GPU keeps working and the remapping takes effect at the next GPU reset: reset it when convenient",
    },
    Xid {
        code: 64,
        severity: Severity::Error,
        meaning: "ECC page retirement or row remapping failed",
        action: "the failing row could not be remapped; drain the node and reset the GPU, replace it if it recurs",
    },
    Xid {
        code: 74,
        severity: Severity::Error,
        meaning: "NVLink error",
        action: "a link between GPUs failed and multi-GPU communication may hang; drain the node, check the NVLink/NVSwitch fabric and reset the GPU",
    },
    Xid {
        code: 79,
        severity: Severity::Fatal,
        meaning: "GPU has fallen off the bus",
        action: "the GPU is unreachable; drain the node and reset the GPU or reboot; replace the GPU if it recurs",
    },
    Xid {
        code: 92,
        severity: Severity::Warn,
        meaning: "high single-bit ECC error rate",
        action: "the GPU memory is degrading; plan a GPU reset or replacement",
    },
    Xid {
        code: 94,
        severity: Severity::Error,
        meaning: "contained ECC error",
        action: "an uncorrectable memory error was contained to the applications using that memory, which were stopped and must restart; the others go on; reset the GPU when possible",
    },
    Xid {
        code: 95,
        severity: Severity::Fatal,
        meaning: "uncontained ECC error",
        action: "an uncorrectable memory error that can affect every application on the GPU; drain the node and reset the GPU",
    },
    Xid {
        code: 119,
        severity: Severity::Error,
        meaning: "GSP RPC timeout",
        action: "the GPU firmware (GSP) stopped answering; reset the GPU, and update the driver if it recurs",
    },
    Xid {
        code: 120,
        severity: Severity::Error,
        meaning: "GSP error",
        action: "the GPU firmware (GSP) reported an error; reset the GPU, and update the driver if it recurs",
    },
];

/// The XID of a double-bit (uncorrectable) ECC error; the `nvidia.gpu.ecc` event of one
/// gives the same advice.
pub const DOUBLE_BIT_ECC: u64 = 48;

/// What to do about a code that is not in [`XIDS`].
pub const UNKNOWN_ACTION: &str = "not in the agent's table: look the code up in NVIDIA's XID catalogue (docs.nvidia.com/deploy/xid-errors) and the node's kernel log (dmesg)";

/// The row of `code`; `None` for a code not in [`XIDS`].
pub fn lookup(code: u64) -> Option<&'static Xid> {
    XIDS.iter().find(|x| x.code == code)
}

/// Severity of the `nvidia.gpu.xid` event of `code`: the table's, `Warn` for a code not in
/// it.
pub fn severity(code: u64) -> Severity {
    lookup(code).map_or(Severity::Warn, |x| x.severity)
}

/// The text of `code` in an `nvidia.gpu.xid` event's body, `meaning: action` (no final
/// period), or [`UNKNOWN_ACTION`].
pub fn text(code: u64) -> String {
    match lookup(code) {
        Some(x) => format!("{}: {}", x.meaning, x.action),
        None => UNKNOWN_ACTION.to_string(),
    }
}

/// The hint that ends the `xid` rule's alert body: `XID 48 (meaning): action.`, or
/// `XID 48: ` and [`UNKNOWN_ACTION`]. Same meaning and action as [`text`].
pub fn hint(code: u64) -> String {
    match lookup(code) {
        Some(x) => format!("XID {code} ({}): {}.", x.meaning, x.action),
        None => format!("XID {code}: {UNKNOWN_ACTION}."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_double_bit_ecc_code_is_in_the_table() {
        assert_eq!(
            lookup(DOUBLE_BIT_ECC).map(|x| x.meaning),
            Some("double-bit ECC error")
        );
    }

    #[test]
    fn codes_are_unique_and_sorted() {
        assert!(XIDS.windows(2).all(|w| w[0].code < w[1].code));
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
            let body = text(code);
            assert!(body.contains(words), "XID {code}: {body}");
        }
        assert_eq!(severity(79), Severity::Fatal);
        assert_eq!(severity(13), Severity::Warn);
        assert!(text(12345).contains("XID catalogue"));
    }

    #[test]
    fn a_code_gets_its_row_and_an_unknown_one_the_catalogue() {
        assert_eq!(
            text(64),
            "ECC page retirement or row remapping failed: the failing row could not be remapped; drain the node and reset the GPU, replace it if it recurs"
        );
        assert_eq!(severity(79), Severity::Fatal);
        assert_eq!(severity(12345), Severity::Warn);
        assert!(text(12345).contains("XID catalogue"));
    }
}
