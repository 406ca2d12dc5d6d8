//! The `loop_shapes` GPU case: one streaming elementwise kernel (y = x * 0.5 + 1 on the bench's
//! float32 shape) written in several loop shapes (`loop_shapes.cu`): grid-stride loops with one,
//! two or four 16-byte vectors per thread per step, one or four vectors per thread over as many
//! blocks as it takes, and streaming cache hints; with grids of 16 or 8 blocks per
//! multiprocessor. It is how the elementwise printer's shape was chosen: by measurement on the
//! GPU, read against `d2d_copy`.

use crate::{median_ms, Row, SHAPE};
use cudarc::driver::result as cu;
use kiln::backend::cuda::{context, memory::DeviceBlock, nvrtc};

const BODY: &str = include_str!("loop_shapes.cu");

/// Times every loop shape; each row's bandwidth counts one read and one write per element.
pub fn run(reps: usize) -> Vec<Row> {
    let n: usize = SHAPE.iter().product();
    let vectors = n / 4;
    let g = context::gpu("bench", 0).expect("GPU 0");
    let stream = g.stream("bench", 0).expect("stream");
    let x = DeviceBlock::new("bench", g, stream, n * 4).expect("alloc");
    let y = DeviceBlock::new("bench", g, stream, n * 4).expect("alloc");
    let sm = g.multiprocessors as usize;
    let blocks = |per_block: usize| vectors.div_ceil(per_block);
    let shapes: [(&'static str, &'static str, usize); 8] = [
        ("stride1 x16/SM", "stride1", blocks(256).min(sm * 16)),
        ("stride1 x8/SM", "stride1", blocks(256).min(sm * 8)),
        ("stride2 x16/SM", "stride2", blocks(256).min(sm * 16)),
        ("stride4 x16/SM", "stride4", blocks(256).min(sm * 16)),
        ("stride4 x8/SM", "stride4", blocks(256).min(sm * 8)),
        ("one_each", "one_each", blocks(256)),
        ("four_each", "four_each", blocks(1024)),
        ("stride1_streaming x16/SM", "stride1_streaming", blocks(256).min(sm * 16)),
    ];
    shapes
        .iter()
        .map(|&(name, entry, grid)| {
            let f = nvrtc::handwritten("bench", g, BODY, String::new(), entry).expect("the loop shapes build");
            let ms = median_ms(reps, || {
                f.launch_params("bench", stream, grid, 256, 0, &mut [x.ptr, y.ptr, vectors as u64]).expect("launch");
                unsafe { cu::stream::synchronize(stream).expect("sync") };
            });
            Row::new("loop_shapes", name, ms).bytes(2 * n * 4)
        })
        .collect()
}
