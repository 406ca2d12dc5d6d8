//! Memory statistics and limits as mlx.core names them, covering host and GPU memory, and the
//! count of copies between them.

use pyo3::prelude::*;

/// Bytes held by live arrays (host and GPU).
#[pyfunction]
fn get_active_memory() -> usize {
    kiln::active_memory()
}

/// The most bytes live arrays held at once since start or the last reset.
#[pyfunction]
fn get_peak_memory() -> usize {
    kiln::peak_memory()
}

/// Starts the peak over from the current active bytes.
#[pyfunction]
fn reset_peak_memory() {
    kiln::reset_peak_memory()
}

/// Bytes kept for reuse by the host cache and the GPUs' pools.
#[pyfunction]
fn get_cache_memory() -> usize {
    kiln::cache_memory()
}

/// Sets how many freed bytes the caches keep; returns the previous limit.
#[pyfunction]
fn set_cache_limit(limit: usize) -> usize {
    kiln::set_cache_limit(limit)
}

/// Sets the most bytes arrays may hold on a GPU (0: no limit); returns the previous limit.
#[pyfunction]
fn set_memory_limit(limit: usize) -> usize {
    kiln::set_memory_limit(limit)
}

/// Returns cached memory to the system.
#[pyfunction]
fn clear_cache() {
    kiln::clear_cache()
}

/// Copies between host and GPU memory so far, as a dict of counts and bytes each way.
#[pyfunction]
fn transfers(py: Python<'_>) -> PyResult<Bound<'_, pyo3::types::PyDict>> {
    let t = kiln::transfers();
    let d = pyo3::types::PyDict::new(py);
    d.set_item("to_device", t.to_device)?;
    d.set_item("to_device_bytes", t.to_device_bytes)?;
    d.set_item("to_host", t.to_host)?;
    d.set_item("to_host_bytes", t.to_host_bytes)?;
    Ok(d)
}

/// Adds the memory functions to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(get_active_memory, m)?)?;
    m.add_function(wrap_pyfunction!(get_peak_memory, m)?)?;
    m.add_function(wrap_pyfunction!(reset_peak_memory, m)?)?;
    m.add_function(wrap_pyfunction!(get_cache_memory, m)?)?;
    m.add_function(wrap_pyfunction!(set_cache_limit, m)?)?;
    m.add_function(wrap_pyfunction!(set_memory_limit, m)?)?;
    m.add_function(wrap_pyfunction!(clear_cache, m)?)?;
    m.add_function(wrap_pyfunction!(transfers, m)?)
}
