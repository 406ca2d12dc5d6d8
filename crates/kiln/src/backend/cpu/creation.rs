//! Ops that make data from parameters alone.

use super::strided::alloc;
use crate::buffer::Buffer;
use crate::dtype::{Dtype, Element};

/// `start + i * step` for each i, computed in float64 and converted to `dtype`.
pub fn arange(start: f64, step: f64, shape: &[usize], dtype: Dtype) -> Buffer {
    let out = alloc(shape, dtype);
    crate::with_dtype!(dtype, T => {
        let p = out.ptr::<T>();
        for i in 0..shape[0] {
            // Safety: the buffer holds shape[0] elements.
            unsafe { *p.add(i) = T::from_f64(start + i as f64 * step) };
        }
    });
    out
}
