//! The `qmatmul` case: a 4096x4096 linear layer's weight quantized (affine 4-bit groups of 64,
//! mxfp4, mxfp8) times one row (a decoding step's matrix-vector product) and times 32 rows,
//! against the same product with the float32 weight. GB/s count the bytes the weight takes
//! (words, scales, biases), which a matrix-vector product must read once; `dequantize_matmul`
//! is the composition the fused kernels replaced (dequantize the whole weight, then multiply).
//! The same rows run on the CPU and, with `--device gpu`, on the GPU.

use crate::{median_ms, random_input, Row};
use kiln::ops::{self, FloatFormat, Scheme};
use kiln::{Array, Dtype};

/// The weight's rows and columns.
const SIDE: usize = 4096;

/// One quantized form of the weight: its words, scales and (affine) biases.
struct Form {
    /// Row labels: the matrix-vector product's and the 32-row one's.
    labels: [&'static str; 2],
    words: Array,
    scales: Array,
    biases: Option<Array>,
    format: Option<FloatFormat>,
}

impl Form {
    fn scheme(&self) -> Scheme<'_> {
        match (&self.biases, self.format) {
            (Some(biases), _) => Scheme::affine(biases, 64, 4),
            (None, format) => Scheme::Float { format: format.expect("a float form"), global_scale: None },
        }
    }

    fn nbytes(&self) -> usize {
        self.words.nbytes() + self.scales.nbytes() + self.biases.as_ref().map_or(0, Array::nbytes)
    }
}

/// The weight in each form.
fn forms(w: &Array) -> Vec<Form> {
    let (words, scales, biases) = ops::quantize(w, 64, 4).expect("quantize");
    let mut forms = vec![Form { labels: ["matvec affine4", "batch32 affine4"], words, scales, biases: Some(biases), format: None }];
    let floats = [(["matvec mxfp4", "batch32 mxfp4"], FloatFormat::Mxfp4), (["matvec mxfp8", "batch32 mxfp8"], FloatFormat::Mxfp8)];
    for (labels, format) in floats {
        let (words, scales) = ops::quantize_float(w, format, None).expect("quantize_float");
        forms.push(Form { labels, words, scales, biases: None, format: Some(format) });
    }
    for f in &forms {
        kiln::eval(&[&f.words, &f.scales]).expect("eval");
    }
    forms
}

/// The case's rows (see the module doc); `finish` evaluates a result (and waits for a GPU).
pub fn qmatmul(reps: usize, finish: fn(&Array)) -> Vec<Row> {
    let w = random_input(&[SIDE, SIDE]);
    let forms = forms(&w);
    let mut rows = Vec::new();
    for (i, (m, dense_label)) in [(1, "matvec float32"), (32, "batch32 float32")].into_iter().enumerate() {
        let x = random_input(&[m, SIDE]);
        let flops = 2.0 * (m * SIDE * SIDE) as f64;
        let dense = median_ms(reps, || finish(&ops::matmul(&x, ops::swapaxes(&w, 0, 1).unwrap()).unwrap()));
        rows.push(Row::new("qmatmul", dense_label, dense).bytes(w.nbytes()).flops(flops));
        for f in &forms {
            let ms = median_ms(reps, || finish(&ops::quantized_matmul(&x, &f.words, &f.scales, f.scheme(), true).unwrap()));
            rows.push(Row::new("qmatmul", f.labels[i], ms).bytes(f.nbytes()).flops(flops));
        }
    }
    // The composition the kernel replaced, on the affine form.
    let (x, affine) = (random_input(&[1, SIDE]), &forms[0]);
    let composed = median_ms(reps, || {
        let dense = ops::dequantize(&affine.words, &affine.scales, affine.scheme(), Some(Dtype::F32)).unwrap();
        finish(&ops::matmul(&x, ops::swapaxes(dense, 0, 1).unwrap()).unwrap())
    });
    rows.push(Row::new("qmatmul", "matvec affine4 dequantize_matmul", composed).bytes(affine.nbytes()));
    rows
}
