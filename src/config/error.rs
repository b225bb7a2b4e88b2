//! [`ConfigError`]: a setting that could not be accepted, named, with what it accepts.

use super::PREFIX;

/// A setting that could not be accepted: the variable, the value as given and what the
/// variable accepts. Displayed as one sentence ([`ConfigProblem`] says which).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Name of the environment variable, e.g. `GPU_SIDECAR_SAMPLE_INTERVAL`.
    pub var: String,
    /// The value as read (secrets are replaced by `<redacted>`); empty when unset.
    pub value: String,
    /// What the variable accepts, in words; for [`ConfigProblem::NoSuchSetting`], that it
    /// must be a known name.
    pub expected: String,
    /// What is wrong.
    pub problem: ConfigProblem,
}

/// What is wrong with a setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigProblem {
    /// The value is not one the variable accepts: `invalid VAR="value": expected …`.
    Invalid,
    /// The variable is unset (or empty) and must be set: `VAR is not set: expected …`.
    Unset,
    /// A `GPU_SIDECAR_*` name that is no setting (a typo, typically), with the nearest known
    /// name when one is close: `VAR is not a setting; did you mean …?`.
    NoSuchSetting {
        /// The known setting nearest to it, when near enough to be a typo of it.
        nearest: Option<String>,
    },
}

impl ConfigError {
    /// A bad value of `var`, or ([`ConfigProblem::Unset`]) no value when `value` is empty:
    /// an empty variable counts as unset, so it is never "invalid".
    pub(crate) fn new(var: &str, value: &str, expected: impl Into<String>) -> Self {
        Self {
            var: var.to_string(),
            value: value.to_string(),
            expected: expected.into(),
            problem: if value.is_empty() {
                ConfigProblem::Unset
            } else {
                ConfigProblem::Invalid
            },
        }
    }

    /// `var` (set to `value`) is no setting; `nearest` is the known name it is probably a
    /// typo of.
    pub(crate) fn no_such_setting(var: &str, value: &str, nearest: Option<String>) -> Self {
        Self {
            var: var.to_string(),
            value: value.to_string(),
            expected: "the name of a setting (gpu-otel-sidecar --help lists them)".to_string(),
            problem: ConfigProblem::NoSuchSetting { nearest },
        }
    }
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (var, value, expected) = (&self.var, &self.value, &self.expected);
        match &self.problem {
            ConfigProblem::Invalid => write!(f, "invalid {var}={value:?}: expected {expected}"),
            ConfigProblem::Unset => write!(f, "{var} is not set: expected {expected}"),
            ConfigProblem::NoSuchSetting { nearest: Some(near) } => write!(
                f,
                "{var} is not a setting; did you mean {near}? (gpu-otel-sidecar --help lists every setting)"
            ),
            ConfigProblem::NoSuchSetting { nearest: None } => write!(
                f,
                "{var} is not a setting, and no setting has a name close to it; every {PREFIX}* variable must be one (gpu-otel-sidecar --help lists them)"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}
