//! The alert rules' settings (`GPU_SIDECAR_RULE_<NAME>_*`), read against the rule table
//! ([`crate::rules::catalogue::RULES`]).

use super::values::{parse_bool, parse_duration};
use super::ConfigError;
pub use crate::rules::catalogue::RuleSettings;
use crate::rules::catalogue::{Hold, HoldSpec, RuleId, ThresholdSpec, RULES};

/// The settings of every rule, in the rule table's order.
#[derive(Debug, Clone, PartialEq)]
pub struct RulesConfig(pub Vec<(RuleId, RuleSettings)>);

impl RulesConfig {
    /// One rule's settings.
    ///
    /// # Panics
    /// Never for a `RulesConfig` built by [`super::Config::from_vars`] (it has every rule).
    pub fn get(&self, id: RuleId) -> RuleSettings {
        self.0
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, s)| *s)
            .expect("RulesConfig holds every rule")
    }

    /// Whether any rule is enabled.
    pub fn any_enabled(&self) -> bool {
        self.0.iter().any(|(_, s)| s.enabled)
    }

    /// Node mode's rules: `utilization_imbalance` off (it compares one pod's GPUs; a node's
    /// GPUs belong to different pods).
    pub(super) fn for_node(&mut self) {
        for (id, rule) in &mut self.0 {
            if *id == RuleId::UtilizationImbalance {
                rule.enabled = false;
            }
        }
    }
}

pub(super) fn parse_rules<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
) -> Result<RulesConfig, ConfigError> {
    let mut out = Vec::with_capacity(RULES.len());
    for spec in RULES {
        let var = spec.var("ENABLED");
        let enabled = match get(&var) {
            None => true,
            Some(v) => parse_bool(&var, v)?,
        };
        let threshold = match spec.threshold {
            None => None,
            Some(t) => {
                let var = spec.var("THRESHOLD");
                Some(match get(&var) {
                    None => t.default,
                    Some(v) => parse_threshold(&var, v, &t)?,
                })
            }
        };
        let second_threshold = match spec.second_threshold {
            None => None,
            Some(t) => {
                let var = spec.var(t.suffix);
                Some(match get(&var) {
                    None => t.spec.default,
                    Some(v) => parse_threshold(&var, v, &t.spec)?,
                })
            }
        };
        let hold = match spec.hold {
            HoldSpec::Immediate => Hold::Immediate,
            HoldSpec::Duration(d) => {
                let var = spec.var("DURATION");
                Hold::Duration(match get(&var) {
                    None => d,
                    Some(v) => parse_duration(&var, v)?,
                })
            }
            HoldSpec::Samples(n) => {
                let var = spec.var("SAMPLES");
                Hold::Samples(match get(&var) {
                    None => n,
                    Some(v) => match v.trim().parse::<u32>() {
                        Ok(n) if n > 0 => n,
                        _ => {
                            return Err(ConfigError::new(
                                &var,
                                v,
                                "a whole number of consecutive samples, at least 1",
                            ))
                        }
                    },
                })
            }
        };
        out.push((
            spec.id,
            RuleSettings {
                enabled,
                threshold,
                second_threshold,
                hold,
            },
        ));
    }
    Ok(RulesConfig(out))
}

pub(super) fn parse_threshold(var: &str, v: &str, t: &ThresholdSpec) -> Result<f64, ConfigError> {
    let raw = v.trim();
    let raw = if t.percent {
        raw.strip_suffix('%').unwrap_or(raw).trim_end()
    } else {
        raw
    };
    let expected = threshold_accepts(t);
    match raw.parse::<f64>() {
        Ok(x) if x.is_finite() && (x > t.min || (!t.min_exclusive && x == t.min)) && x <= t.max => {
            Ok(x)
        }
        _ => Err(ConfigError::new(var, v, expected)),
    }
}

/// What a threshold setting accepts, in words (its error message and `docs/settings.md`).
pub(super) fn threshold_accepts(t: &ThresholdSpec) -> String {
    let low = if t.min_exclusive { "above" } else { "from" };
    format!("a number {low} {} up to {} ({})", t.min, t.max, t.unit)
}
