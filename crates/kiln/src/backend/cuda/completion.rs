//! Completion words: a quicker wait for a stream whose last work is one small kernel.
//!
//! Waiting with `cuStreamSynchronize` goes through the driver's completion tracking. Measured on
//! an H100 (driver 580): an empty kernel launched and waited for that way took 8.2 to 9.0 µs,
//! while the same kernel writing a word of mapped host memory, with the host spinning on that
//! word, took 6.4 to 6.6 µs. So a one-block elementwise kernel (an eager op or a compiled call on
//! a few elements: where that wait is most of the cost) ends by writing its launch's sequence
//! number into its stream's word, and [`Streams::wait_armed`] lets `synchronize` spin on the
//! word instead of asking the driver.
//!
//! That is only right while the kernel is the last work on the stream. Every op takes its
//! stream through [`Streams::take`], which disarms it; a stream any second thread has taken is
//! never armed again (another thread could queue work between a kernel and its arming). Work
//! queued without taking the stream (a free, an event, a host copy that waits for itself) is
//! never work a waiter waits for. A word that does not arrive within [`SPIN`] leaves the wait
//! to the driver, which also reports a failed kernel.

use super::switch::Switch;
use crate::fast_hash::FastMap;
use cudarc::driver::{result as cu, sys};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// Streams (by kiln stream index, from 0) that have a completion word.
const WORDS: usize = 64;

/// How long a wait spins on a word before leaving it to the driver.
const SPIN: Duration = Duration::from_millis(2);

/// Whether one-block kernels signal completion words: on unless `KILN_CUDA_WAIT_WORDS=0` (then
/// every wait is the driver's, for comparison).
static SIGNALS: Switch = Switch::new("KILN_CUDA_WAIT_WORDS", true);

/// Stream waits done by a completion word, and through the driver.
static WAITS: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// How many stream waits (`synchronize`) went by a completion word, and how many through the
/// driver, since the process started: what tests and benchmarks check the fast path by.
pub fn waits() -> (u64, u64) {
    (WAITS[0].load(Ordering::Relaxed), WAITS[1].load(Ordering::Relaxed))
}

/// Counts one stream wait, by a word or not.
pub(super) fn count_wait(by_word: bool) {
    WAITS[usize::from(!by_word)].fetch_add(1, Ordering::Relaxed);
}

/// One kiln stream of a GPU.
struct Entry {
    /// The CUDA stream.
    handle: usize,
    /// The one thread that has taken it, while only one has.
    owner: Option<ThreadId>,
    /// How many times it was taken (any op that may queue work takes it).
    uses: u64,
    /// The sequence number of its last signalling kernel.
    seq: u32,
    /// `(uses, seq)` when a signalling kernel was the last work queued.
    armed: Option<(u64, u32)>,
}

/// The CUDA streams of one GPU, with their completion words.
pub struct Streams {
    entries: Mutex<FastMap<usize, Entry>>,
    /// `WORDS` words of pinned host memory the GPU writes through its mapping, and the device
    /// address of the first; None where they could not be allocated (then nothing signals).
    words: Option<(usize, u64)>,
    /// How long a wait spins ([`SPIN`]).
    spin: Duration,
}

/// What a signalling kernel writes: `seq` to the word at device address `word`.
#[derive(Clone, Copy, Debug)]
pub struct Ticket {
    /// Device address of the stream's word.
    pub word: u64,
    /// The value to write.
    pub seq: u32,
    uses: u64,
    index: usize,
}

impl Streams {
    /// Streams whose completion words are `words` (see [`allocate_words`]; None: no signals).
    pub fn new(words: Option<(usize, u64)>) -> Streams {
        Streams { entries: Mutex::new(FastMap::default()), words, spin: SPIN }
    }

    fn lock(&self) -> MutexGuard<'_, FastMap<usize, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The CUDA stream of kiln stream `index` (made by `create` on first use) for an op that may
    /// queue work on it: the stream is disarmed, and shared once a second thread takes it.
    pub fn take(&self, index: usize, create: impl FnOnce() -> crate::Result<usize>) -> crate::Result<usize> {
        let me = std::thread::current().id();
        let mut entries = self.lock();
        let entry = match entries.entry(index) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(Entry { handle: create()?, owner: Some(me), uses: 0, seq: 0, armed: None })
            }
        };
        if entry.owner != Some(me) {
            entry.owner = None;
        }
        entry.uses += 1;
        entry.armed = None;
        Ok(entry.handle)
    }

    /// The CUDA stream of kiln stream `index` for a wait (taking nothing), if it exists.
    pub fn peek(&self, index: usize) -> Option<usize> {
        self.lock().get(&index).map(|e| e.handle)
    }

    /// A ticket for a signalling kernel about to be queued on CUDA stream `handle` by this
    /// thread, or None where the stream cannot be armed (shared, unnumbered, no words).
    pub fn ticket(&self, handle: usize) -> Option<Ticket> {
        let (_, device) = self.words.filter(|_| SIGNALS.get())?;
        let me = std::thread::current().id();
        let mut entries = self.lock();
        let (&index, entry) = entries.iter_mut().find(|(&i, e)| e.handle == handle && i < WORDS && e.owner == Some(me))?;
        entry.seq = entry.seq.wrapping_add(1);
        Some(Ticket { word: device + 4 * index as u64, seq: entry.seq, uses: entry.uses, index })
    }

    /// Marks the kernel of `ticket` as queued: its stream is armed unless something else took it
    /// since the ticket.
    pub fn arm(&self, ticket: Ticket) {
        if let Some(entry) = self.lock().get_mut(&ticket.index) {
            if entry.uses == ticket.uses && entry.owner.is_some() {
                entry.armed = Some((ticket.uses, ticket.seq));
            }
        }
    }

    /// Waits for the signalling kernel that is the last work on kiln stream `index`, when there
    /// is one and this thread queued it; false when the driver must wait instead.
    pub fn wait_armed(&self, index: usize) -> bool {
        let Some((host, _)) = self.words else { return false };
        let me = std::thread::current().id();
        let seq = {
            let entries = self.lock();
            match entries.get(&index) {
                Some(Entry { owner: Some(owner), uses, armed: Some((at, seq)), .. }) if *owner == me && at == uses => *seq,
                _ => return false,
            }
        };
        // Safety: the words live as long as the process and are only written by the GPU.
        let word = unsafe { &*((host as *const AtomicU32).add(index)) };
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            // Acquire: once the word shows the kernel done, so do its writes.
            if (word.load(Ordering::Acquire).wrapping_sub(seq) as i32) >= 0 {
                return true;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) && start.elapsed() > self.spin {
                return false;
            }
            std::hint::spin_loop();
        }
    }
}

/// `WORDS` zeroed words of pinned, device-mapped host memory and their device address; None
/// where the driver refuses (then no kernel signals and waits are the driver's).
pub fn allocate_words() -> Option<(usize, u64)> {
    let bytes = 4 * WORDS;
    let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
    // Safety: a fresh allocation of `bytes`, zeroed before any kernel can see it; it is never
    // freed (one page per GPU for the process).
    unsafe {
        let host = cu::malloc_host(bytes, flags).ok()?;
        std::ptr::write_bytes(host as *mut u8, 0, bytes);
        let mut device: sys::CUdeviceptr = 0;
        sys::cuMemHostGetDevicePointer_v2(&mut device, host, 0).result().ok()?;
        Some((host as usize, device))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Streams over plain host words (their device address is their host address) that spin
    /// for up to 20 s, so a busy test machine cannot make them give up: the tests write a word as
    /// a kernel would.
    fn streams() -> (Streams, &'static [AtomicU32; WORDS]) {
        let words: &'static [AtomicU32; WORDS] = Box::leak(Box::new(std::array::from_fn(|_| AtomicU32::new(0))));
        let at = words.as_ptr() as usize;
        (Streams { spin: Duration::from_secs(20), ..Streams::new(Some((at, at as u64))) }, words)
    }

    fn create(handle: usize) -> impl FnOnce() -> crate::Result<usize> {
        move || Ok(handle)
    }

    #[test]
    fn a_wait_spins_until_the_last_kernel_writes_its_word() {
        let (s, words) = streams();
        assert_eq!(s.take(3, create(0x30)).unwrap(), 0x30);
        let t = s.ticket(0x30).expect("an unshared stream signals");
        assert_eq!((t.seq, t.word), (1, words.as_ptr() as u64 + 12));
        s.arm(t);
        let start = Instant::now();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_micros(300));
            words[3].store(1, Ordering::Release);
        });
        assert!(s.wait_armed(3));
        assert!(start.elapsed() >= Duration::from_micros(300), "returned before the word was written");
        writer.join().unwrap();
        // A later kernel's number: the word must reach it, an older one is not enough.
        let t = s.ticket(0x30).unwrap();
        assert_eq!(t.seq, 2);
        s.arm(t);
        let s = Streams { spin: Duration::from_millis(1), ..s };
        assert!(!s.wait_armed(3), "the word still holds the first kernel's number");
    }

    #[test]
    fn taking_the_stream_again_leaves_the_wait_to_the_driver() {
        let (s, words) = streams();
        s.take(0, create(7)).unwrap();
        let t = s.ticket(7).unwrap();
        words[0].store(t.seq, Ordering::Release);
        // Another op took the stream between the ticket and the arming: not armed.
        s.take(0, create(7)).unwrap();
        s.arm(t);
        assert!(!s.wait_armed(0));
        // Armed, then another op: disarmed.
        let t = s.ticket(7).unwrap();
        words[0].store(t.seq, Ordering::Release);
        s.arm(t);
        assert!(s.wait_armed(0));
        s.take(0, create(7)).unwrap();
        assert!(!s.wait_armed(0));
    }

    #[test]
    fn a_stream_another_thread_took_never_signals() {
        let (s, _) = streams();
        let s = std::sync::Arc::new(s);
        s.take(1, create(9)).unwrap();
        let other = s.clone();
        std::thread::spawn(move || other.take(1, create(9)).unwrap()).join().unwrap();
        assert!(s.ticket(9).is_none());
        assert!(!s.wait_armed(1));
        // Streams past the words, and unknown handles, never signal either.
        s.take(WORDS, create(11)).unwrap();
        assert!(s.ticket(11).is_none() && s.ticket(12).is_none());
    }

    #[test]
    fn a_word_that_never_arrives_gives_up_after_the_spin() {
        let (s, _) = streams();
        let s = Streams { spin: SPIN, ..s };
        s.take(2, create(5)).unwrap();
        let t = s.ticket(5).unwrap();
        s.arm(t);
        let start = Instant::now();
        assert!(!s.wait_armed(2));
        assert!(start.elapsed() >= SPIN);
    }
}
