//! On/off settings of the CUDA backend that an environment variable sets at first use and a
//! function changes at run time (TF32 in matmuls, CUDA graphs for compiled plans).

use std::sync::atomic::{AtomicU8, Ordering};

/// A setting: off unless its environment variable is `1`/`true` or [`Switch::set`] turned it on.
pub(super) struct Switch {
    /// 0 off, 1 on, 2 not read yet.
    state: AtomicU8,
    variable: &'static str,
}

impl Switch {
    /// A setting read from `variable` at first use.
    pub(super) const fn new(variable: &'static str) -> Switch {
        Switch { state: AtomicU8::new(2), variable }
    }

    /// Whether the setting is on.
    pub(super) fn get(&self) -> bool {
        match self.state.load(Ordering::Relaxed) {
            2 => {
                let on = std::env::var(self.variable).is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
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
