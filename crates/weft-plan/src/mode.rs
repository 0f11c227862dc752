//! `WEFT_NATIVE_EMIT`: whether twins are emitted, and what a mismatch means.

use std::fmt;
use std::str::FromStr;

/// The environment variable [`EmitMode::from_env`] reads.
pub const EMIT_MODE_VAR: &str = "WEFT_NATIVE_EMIT";

/// What to do with twins, as `WEFT_NATIVE_EMIT` says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum EmitMode {
    /// `on` (also unset or empty): twins are validated; a refused twin is
    /// simply not offered.
    #[default]
    On,
    /// `off`: the kill switch; no twin is emitted, the plan is the arms' alone.
    Off,
    /// `strict`: a developer override; a mismatch (or emit error) stops the
    /// compile with that refusal as the error.
    Strict,
}

/// `WEFT_NATIVE_EMIT` holds a value that is not a mode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad-mode: {EMIT_MODE_VAR}={value:?} is not a mode: expected `on`, `off` or `strict`")]
pub struct EmitModeError {
    /// The value found (lossily decoded when it was not UTF-8).
    pub value: String,
}

impl EmitMode {
    /// The mode `WEFT_NATIVE_EMIT` names; unset means [`EmitMode::On`].
    pub fn from_env() -> Result<EmitMode, EmitModeError> {
        match std::env::var_os(EMIT_MODE_VAR) {
            None => Ok(EmitMode::On),
            Some(raw) => match raw.to_str() {
                Some(s) => s.parse(),
                None => Err(EmitModeError {
                    value: raw.to_string_lossy().into_owned(),
                }),
            },
        }
    }

    /// The mode's name as the variable spells it.
    pub fn name(self) -> &'static str {
        match self {
            EmitMode::On => "on",
            EmitMode::Off => "off",
            EmitMode::Strict => "strict",
        }
    }
}

impl FromStr for EmitMode {
    type Err = EmitModeError;

    /// `on`, `off` or `strict`, ignoring ASCII case and surrounding
    /// whitespace; the empty string is `on`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if t.is_empty() || t.eq_ignore_ascii_case("on") {
            Ok(EmitMode::On)
        } else if t.eq_ignore_ascii_case("off") {
            Ok(EmitMode::Off)
        } else if t.eq_ignore_ascii_case("strict") {
            Ok(EmitMode::Strict)
        } else {
            Err(EmitModeError {
                value: s.to_owned(),
            })
        }
    }
}

impl fmt::Display for EmitMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_modes_and_names_a_bad_value() {
        assert_eq!("".parse(), Ok(EmitMode::On));
        assert_eq!("on".parse(), Ok(EmitMode::On));
        assert_eq!(" OFF ".parse(), Ok(EmitMode::Off));
        assert_eq!("strict".parse(), Ok(EmitMode::Strict));
        let err = "sometimes".parse::<EmitMode>().unwrap_err();
        assert_eq!(err.value, "sometimes");
        assert!(
            err.to_string().contains("WEFT_NATIVE_EMIT=\"sometimes\""),
            "{err}"
        );
        for m in [EmitMode::On, EmitMode::Off, EmitMode::Strict] {
            assert_eq!(m.name().parse(), Ok(m));
        }
    }
}
