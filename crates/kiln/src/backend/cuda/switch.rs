//! On/off settings of the CUDA backend that an environment variable sets at first use and a
//! function changes at run time (TF32 in matmuls, CUDA graphs for compiled plans).

use std::sync::atomic::{AtomicU8, Ordering};

/// A setting: its default unless its environment variable is `1`/`true` (on) or `0`/`false`
/// (off), or [`Switch::set`] changed it.
pub(super) struct Switch {
    /// 0 off, 1 on, 2 not read yet.
    state: AtomicU8,
    variable: &'static str,
    default: bool,
}

impl Switch {
    /// A setting read from `variable` at first use, `default` when it is unset or unreadable.
    pub(super) const fn new(variable: &'static str, default: bool) -> Switch {
        Switch { state: AtomicU8::new(2), variable, default }
    }

    /// Whether the setting is on.
    pub(super) fn get(&self) -> bool {
        match self.state.load(Ordering::Relaxed) {
            2 => {
                let on = match std::env::var(self.variable).as_deref() {
                    Ok("1") => true,
                    Ok("0") => false,
                    Ok(v) if v.eq_ignore_ascii_case("true") => true,
                    Ok(v) if v.eq_ignore_ascii_case("false") => false,
                    _ => self.default,
                };
                self.state.store(u8::from(on), Ordering::Relaxed);
                on
            }
            v => v == 1,
        }
    }

    /// Sets the setting; returns the previous value.
    pub(super) fn set(&self, on: bool) -> bool {
        let before = self.get();
        self.state.store(u8::from(on), Ordering::Relaxed);
        before
    }
}
