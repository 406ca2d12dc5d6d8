//! What the GPU tests share: one GPU test at a time per process, and skip lines where there is no
//! GPU or no NVRTC.

use kiln::backend::cuda::nvrtc;
use kiln::Device;

/// GPU tests run one at a time: the transfer counters and the memory limit are process-wide.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// GPU 0 with this test holding the GPU tests' lock, or `None` after printing why the test is
/// skipped.
pub fn gpu(test: &str) -> Option<(Device, std::sync::MutexGuard<'static, ()>)> {
    let d = Device::gpu(0);
    if d.is_available() {
        return Some((d, ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())));
    }
    let why = kiln::set_default_device(d).err().map(|e| e.message).unwrap_or_default();
    println!("skipped {test}: no usable GPU ({why})");
    None
}

/// Whether NVRTC is found, printing a skip line when not.
pub fn nvrtc_found(test: &str) -> bool {
    match nvrtc::version("test") {
        Ok(_) => true,
        Err(e) => {
            println!("skipped {test}: {}", e.message);
            false
        }
    }
}
