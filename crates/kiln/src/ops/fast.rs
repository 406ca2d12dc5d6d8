//! mlx's `fast` layer ops: [`rms_norm`], [`layer_norm`], [`rope`] and
//! [`scaled_dot_product_attention`].
//!
//! Each is a composition of core ops, computed in float32 whatever the input's precision (float64
//! stays float64), as mlx's kernels compute. The composition runs as a compiled function shared
//! by the process, keyed by the input signature and the op's settings: an eager call evaluates
//! its inputs and runs the op's fused plan at once, so a norm or a rotary embedding is one fused
//! kernel on the CPU and on the GPU (a rotation of only some features adds the copy of the
//! others), and attention is its two products around one fused masked softmax. Under grad, vjp, jvp, vmap or an outer compile the composition itself runs (a
//! compiled function is inlined there), so derivatives and batching come from the core ops and
//! an outer compile fuses across the op. Arguments are checked here, before anything runs.

use crate::array::Array;
use crate::dtype::{promote_types, Dtype};
use crate::error::{Error, Result};
use crate::ops::{self, AsArray};
use crate::shape::fmt_shape;
use crate::transforms::compile::{compile_with_constants, CompileOptions, Compiled, Constant};
use std::sync::OnceLock;

/// A composition run as a compiled function: arrays in (the optional ones present as the
/// constants say), one array out.
type Body = fn(&[Array], &[Constant]) -> Result<Vec<Array>>;

/// Runs `body` on `inputs` as the compiled function kept in `slot` (made on first use).
fn run_fused(slot: &'static OnceLock<Compiled>, body: Body, inputs: &[Array], constants: &[Constant]) -> Result<Array> {
    let compiled = slot.get_or_init(|| compile_with_constants(body, CompileOptions::new()));
    Ok(compiled.call_with(inputs, constants)?.swap_remove(0))
}

/// The dtype an op computes in: float32 for the half types (and float32), float64 for float64.
fn compute_type(dtype: Dtype) -> Dtype {
    promote_types(dtype, Dtype::F32)
}

fn float_constant(c: &Constant) -> f64 {
    c.as_f64().expect("the op passes a number here")
}

fn flag(c: &Constant) -> bool {
    matches!(c, Constant::Bool(true))
}

/// Refuses `x` (named `name`) unless it is a real floating-point array.
fn check_floating(op: &str, name: &str, x: &Array) -> Result<()> {
    if !x.dtype().is_float() {
        return Err(Error::dtype(op, format!("{name} must be a real floating point array, got {}", x.dtype())));
    }
    Ok(())
}

/// Checks a per-feature parameter (weight or bias): one-dimensional, the size of `x`'s last axis.
fn check_feature_vector(op: &str, x: &Array, name: &str, p: Option<&Array>) -> Result<()> {
    let Some(p) = p else { return Ok(()) };
    let last = x.shape()[x.ndim() - 1];
    if p.shape() != [last] {
        return Err(Error::shape(
            op,
            format!("{name} must be one-dimensional with the size of the last axis of x ({last}), got shape {}", fmt_shape(p.shape())),
        ));
    }
    check_floating(op, name, p)
}

/// The checks both norms make of `x` and their parameters; returns the output dtype (`x`'s
/// promoted with the parameters'), which must be a real floating-point one.
fn check_norm(op: &str, x: &Array, params: &[(&str, Option<&Array>)]) -> Result<Dtype> {
    if x.ndim() == 0 {
        return Err(Error::shape(op, "x must have at least one dimension, got a scalar"));
    }
    let mut out = x.dtype();
    for &(name, p) in params {
        check_feature_vector(op, x, name, p)?;
        out = p.map_or(out, |p| promote_types(out, p.dtype()));
    }
    if !out.is_float() {
        let given = params.iter().filter_map(|(_, p)| p.map(|p| p.dtype().to_string())).collect::<Vec<_>>();
        return Err(Error::dtype(op, format!("the result must be real floating point, got {out} from x of {} and parameters of {given:?}", x.dtype())));
    }
    Ok(out)
}

/// Root-mean-square normalization over the last axis: `x / sqrt(mean(x²) + eps) * weight`
/// (`weight` may be None). The result has `x`'s dtype promoted with `weight`'s.
pub fn rms_norm(x: &Array, weight: Option<&Array>, eps: f32) -> Result<Array> {
    check_norm("rms_norm", x, &[("weight", weight)])?;
    static COMPILED: OnceLock<Compiled> = OnceLock::new();
    let inputs: Vec<Array> = [Some(x), weight].into_iter().flatten().cloned().collect();
    run_fused(&COMPILED, rms_norm_body, &inputs, &[f64::from(eps).into()])
}

fn rms_norm_body(a: &[Array], c: &[Constant]) -> Result<Vec<Array>> {
    let (x, weight) = (&a[0], a.get(1));
    let xf = ops::astype(x, compute_type(x.dtype()))?;
    let mean_square = ops::mean(ops::square(&xf)?, Some(&[-1]), true)?;
    let y = ops::multiply(&xf, ops::rsqrt(ops::add(mean_square, float_constant(&c[0]))?)?)?;
    let out = match weight {
        Some(w) => ops::multiply(ops::astype(y, promote_types(x.dtype(), w.dtype()))?, w)?,
        None => ops::astype(y, x.dtype())?,
    };
    Ok(vec![out])
}

/// Layer normalization over the last axis: `(x - mean) / sqrt(var + eps) * weight + bias`
/// (`weight` and `bias` may be None). The result has `x`'s dtype promoted with the parameters'.
pub fn layer_norm(x: &Array, weight: Option<&Array>, bias: Option<&Array>, eps: f32) -> Result<Array> {
    check_norm("layer_norm", x, &[("weight", weight), ("bias", bias)])?;
    static COMPILED: OnceLock<Compiled> = OnceLock::new();
    let inputs: Vec<Array> = [Some(x), weight, bias].into_iter().flatten().cloned().collect();
    let constants = [f64::from(eps).into(), weight.is_some().into(), bias.is_some().into()];
    run_fused(&COMPILED, layer_norm_body, &inputs, &constants)
}

fn layer_norm_body(a: &[Array], c: &[Constant]) -> Result<Vec<Array>> {
    let x = &a[0];
    let mut params = a[1..].iter();
    let weight = if flag(&c[1]) { params.next() } else { None };
    let bias = if flag(&c[2]) { params.next() } else { None };
    let out_type = [weight, bias].into_iter().flatten().fold(x.dtype(), |d, p| promote_types(d, p.dtype()));
    let xf = ops::astype(x, compute_type(x.dtype()))?;
    let centred = ops::subtract(&xf, ops::mean(&xf, Some(&[-1]), true)?)?;
    let variance = ops::mean(ops::square(&centred)?, Some(&[-1]), true)?;
    let mut y = ops::astype(ops::multiply(&centred, ops::rsqrt(ops::add(variance, float_constant(&c[0]))?)?)?, out_type)?;
    if let Some(w) = weight {
        y = ops::multiply(y, w)?;
    }
    if let Some(b) = bias {
        y = ops::add(y, b)?;
    }
    Ok(vec![y])
}

/// The settings of a rotary position embedding ([`rope`]), as mlx's arguments.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rope {
    /// How many leading features rotate (positive and even); the rest pass through.
    pub dims: i64,
    /// Rotate adjacent feature pairs (`x[2i], x[2i+1]`) rather than the two halves.
    pub traditional: bool,
    /// The frequencies are `base^(-2i/dims)`; None when [`rope`] is given `freqs`.
    pub base: Option<f32>,
    /// Positions are multiplied by this.
    pub scale: f32,
}

/// Rotary position embedding of the first `dims` features of `a` (at least 3-d; positions run
/// along axis -2): feature pairs rotated by `(offset + position) · scale · frequency`, the
/// frequencies `base^(-2i/dims)` or `1 / freqs`. `offset` is a scalar or one per batch element
/// (axis 0); it is an array so that a changing offset replays the same compiled kernel.
pub fn rope(a: &Array, settings: Rope, offset: impl AsArray, freqs: Option<&Array>) -> Result<Array> {
    let offset = offset.as_array();
    check_rope(a, &settings, &offset, freqs)?;
    static COMPILED: OnceLock<Compiled> = OnceLock::new();
    let inputs: Vec<Array> = [Some(a), Some(&offset), freqs].into_iter().flatten().cloned().collect();
    let constants = [
        settings.dims.into(),
        settings.traditional.into(),
        settings.base.map_or(Constant::None, |b| f64::from(b).into()),
        f64::from(settings.scale).into(),
    ];
    run_fused(&COMPILED, rope_body, &inputs, &constants)
}

fn check_rope(a: &Array, settings: &Rope, offset: &Array, freqs: Option<&Array>) -> Result<()> {
    let op = "rope";
    if a.ndim() < 3 {
        return Err(Error::shape(op, format!("the input must have at least 3 dimensions, got shape {}", fmt_shape(a.shape()))));
    }
    let last = a.shape()[a.ndim() - 1];
    let dims = settings.dims;
    if dims <= 0 || dims % 2 == 1 || dims > last as i64 {
        return Err(Error::value(op, format!("dims must be a positive even number at most the last axis ({last}), got {dims}")));
    }
    check_floating(op, "the input", a)?;
    match freqs {
        None if settings.base.is_none() => return Err(Error::value(op, "give either base or freqs")),
        Some(_) if settings.base.is_some() => {
            return Err(Error::value(op, "give either base or freqs, not both (base must be None when freqs are given)"));
        }
        Some(f) if f.shape() != [dims as usize / 2] => {
            return Err(Error::shape(
                op,
                format!("freqs must be one-dimensional with dims / 2 = {} entries, got shape {}", dims / 2, fmt_shape(f.shape())),
            ));
        }
        Some(f) => check_floating(op, "freqs", f)?,
        None => {}
    }
    let per_batch = offset.ndim() == 1 && (offset.size() == 1 || offset.shape()[0] == a.shape()[0]);
    if offset.ndim() > 1 || (offset.ndim() == 1 && !per_batch) {
        return Err(Error::shape(
            op,
            format!(
                "offset must be a scalar or a vector with one entry per batch element ({}), got shape {}",
                a.shape()[0],
                fmt_shape(offset.shape())
            ),
        ));
    }
    if !offset.dtype().is_integer() {
        return Err(Error::dtype(op, format!("offset must be an integer or an integer array, got {}", offset.dtype())));
    }
    Ok(())
}

/// The rotation angles in `compute`, one per element of `pairs` (shape `full`, the positions on
/// axis -3): every input is broadcast to that shape before any arithmetic, so all of it runs in
/// the one domain a fused kernel iterates over.
fn rope_angles(full: &[usize], offset: &Array, freqs: Option<&Array>, c: &[Constant], traditional: bool, compute: Dtype) -> Result<Array> {
    let (dims, rank) = (float_constant(&c[0]), full.len());
    let length = full[rank - 3];
    let positions = ops::reshape(ops::arange(0.0, length as f64, 1.0, compute)?, &[length as i64, 1, 1])?;
    let offset = ops::astype(offset, compute)?;
    let offset = if offset.ndim() == 1 && offset.size() > 1 {
        let mut per_batch = vec![1i64; rank];
        per_batch[0] = offset.size() as i64;
        ops::reshape(&offset, &per_batch)?
    } else {
        offset
    };
    let positions = ops::multiply(ops::add(offset, ops::broadcast_to(positions, full)?)?, float_constant(&c[3]))?;
    let inverse_frequencies = match freqs {
        Some(f) => ops::reciprocal(ops::astype(f, compute)?)?,
        None => {
            let step = -float_constant(&c[2]).ln() / (dims / 2.0);
            ops::exp(ops::multiply(ops::arange(0.0, dims / 2.0, 1.0, compute)?, step)?)?
        }
    };
    let along_pairs = if traditional { [-1, 1] } else { [1, -1] };
    ops::multiply(positions, ops::reshape(inverse_frequencies, &along_pairs)?)
}

/// The rotation as elementwise ops over one domain, so it fuses into one kernel: the rotated
/// features viewed as pairs (`(..., 2, dims/2)` for the two halves, `(..., dims/2, 2)` for
/// adjacent pairs) give `pairs · cos θ + partner · (±sin θ)`, the partner being the pairs
/// reversed (a view).
fn rope_body(a: &[Array], c: &[Constant]) -> Result<Vec<Array>> {
    let (x_in, offset, freqs) = (&a[0], &a[1], a.get(2));
    let compute = compute_type(x_in.dtype());
    let dims = float_constant(&c[0]) as i64;
    let traditional = flag(&c[1]);
    let x = ops::astype(x_in, compute)?;
    let last = x.ndim() as i64 - 1;
    let n = x.shape()[last as usize] as i64;
    let rotating = if dims < n { ops::slice_axis(&x, last, 0, dims)? } else { x.clone() };
    let mut paired: Vec<i64> = rotating.shape()[..last as usize].iter().map(|&d| d as i64).collect();
    let (pair_axis, sign_shape) = if traditional {
        paired.extend([dims / 2, 2]);
        (-1, &[2][..])
    } else {
        paired.extend([2, dims / 2]);
        (-2, &[2, 1][..])
    };
    let pairs = ops::reshape(&rotating, &paired)?;
    let theta = rope_angles(pairs.shape(), offset, freqs, c, traditional, compute)?;
    let sign = ops::astype(Array::from_slice(&[-1.0f32, 1.0], sign_shape)?, compute)?;
    let partner = ops::flip(&pairs, Some(&[pair_axis]))?;
    let rotated = ops::add(ops::multiply(&pairs, ops::cos(&theta)?)?, ops::multiply(partner, ops::multiply(ops::sin(&theta)?, sign)?)?)?;
    let mut rotated_shape = paired;
    rotated_shape.truncate(last as usize);
    rotated_shape.push(dims);
    let mut rotated = ops::reshape(rotated, &rotated_shape)?;
    if dims < n {
        rotated = ops::concatenate(&[rotated, ops::slice_axis(&x, last, dims, n)?], -1)?;
    }
    Ok(vec![ops::astype(rotated, x_in.dtype())?])
}

/// The mask of [`scaled_dot_product_attention`].
#[derive(Clone, Debug)]
pub enum AttentionMask {
    /// Every query sees every key.
    None,
    /// Query `i` sees keys up to `i + keys - queries` (the queries are the last ones).
    Causal,
    /// A boolean array (false hides a score) or an additive one, broadcast to the scores'
    /// shape `(batch, heads, queries, keys)`.
    Array(Array),
}

/// `softmax(q @ kᵀ · scale + mask) @ v` over arrays of shape (batch, heads, length, features),
/// the softmax in float32. Keys and values may have fewer heads than queries (grouped-query
/// attention: query heads share them in equal groups). `sinks` (one per query head) add a score
/// that takes probability but no value.
pub fn scaled_dot_product_attention(
    q: &Array,
    k: &Array,
    v: &Array,
    scale: f32,
    mask: &AttentionMask,
    sinks: Option<&Array>,
) -> Result<Array> {
    let dtype = check_attention(q, k, v, mask, sinks)?;
    static COMPILED: OnceLock<Compiled> = OnceLock::new();
    let mut inputs: Vec<Array> = [q, k, v].into_iter().map(|t| ops::astype(t, dtype)).collect::<Result<_>>()?;
    let mask_kind = match mask {
        AttentionMask::None => "none",
        AttentionMask::Causal => "causal",
        AttentionMask::Array(m) => {
            inputs.push(m.clone());
            "array"
        }
    };
    inputs.extend(sinks.cloned());
    let constants = [f64::from(scale).into(), mask_kind.into(), sinks.is_some().into()];
    run_fused(&COMPILED, attention_body, &inputs, &constants)
}

/// Checks attention's arguments; returns the dtype it computes in (the inputs' promoted).
fn check_attention(q: &Array, k: &Array, v: &Array, mask: &AttentionMask, sinks: Option<&Array>) -> Result<Dtype> {
    let op = "scaled_dot_product_attention";
    let shapes = || format!("queries {}, keys {}, values {}", fmt_shape(q.shape()), fmt_shape(k.shape()), fmt_shape(v.shape()));
    if [q, k, v].iter().any(|t| t.ndim() != 4) {
        return Err(Error::shape(op, format!("queries, keys and values must have 4 dimensions (batch, heads, length, features), got {}", shapes())));
    }
    if q.shape()[3] != k.shape()[3] {
        return Err(Error::shape(op, format!("queries and keys must have the same features, got {}", shapes())));
    }
    if q.shape()[0] != k.shape()[0] {
        return Err(Error::shape(op, format!("queries and keys must have the same batch size, got {}", shapes())));
    }
    if k.shape()[..3] != v.shape()[..3] {
        return Err(Error::shape(op, format!("keys and values must have the same batch, heads and length, got {}", shapes())));
    }
    let (heads, kv_heads) = (q.shape()[1], k.shape()[1]);
    if kv_heads == 0 || heads % kv_heads != 0 {
        return Err(Error::shape(op, format!("query heads ({heads}) must be a multiple of key/value heads ({kv_heads})")));
    }
    let dtype = promote_types(promote_types(q.dtype(), k.dtype()), v.dtype());
    if !dtype.is_float() {
        return Err(Error::dtype(op, format!("queries, keys and values must be floating point, got {dtype}")));
    }
    if let AttentionMask::Array(m) = mask {
        let scores = [q.shape()[0], heads, q.shape()[2], k.shape()[2]];
        if crate::shape::broadcast_shapes(op, m.shape(), &scores).ok().as_deref() != Some(&scores[..]) {
            let (mask, scores) = (fmt_shape(m.shape()), fmt_shape(&scores));
            return Err(Error::shape(op, format!("a mask of shape {mask} does not broadcast to the scores' shape {scores}")));
        }
        if m.dtype() != Dtype::Bool && promote_types(m.dtype(), dtype) != dtype {
            return Err(Error::dtype(op, format!("an additive mask of {} does not promote to the output's {dtype}; pass a boolean mask or one of {dtype}", m.dtype())));
        }
    }
    if let Some(s) = sinks {
        if promote_types(s.dtype(), dtype) != dtype {
            return Err(Error::dtype(op, format!("sinks of {} do not promote to the output's {dtype}", s.dtype())));
        }
        if s.shape() != [heads] {
            return Err(Error::shape(op, format!("sinks must have one entry per query head ({heads}), got shape {}", fmt_shape(s.shape()))));
        }
    }
    Ok(dtype)
}

fn attention_body(a: &[Array], c: &[Constant]) -> Result<Vec<Array>> {
    let (q, mut k, mut v) = (a[0].clone(), a[1].clone(), a[2].clone());
    let has_mask = c[1] == Constant::from("array");
    let mut rest = a[3..].iter();
    let mut mask = if has_mask { rest.next().cloned() } else { None };
    let sinks = if flag(&c[2]) { rest.next() } else { None };
    let (batch, heads, length, features) = (q.shape()[0], q.shape()[1], q.shape()[2], q.shape()[3]);
    let (kv_heads, keys) = (k.shape()[1], k.shape()[2]);
    let repeats = heads / kv_heads;
    let scale = ops::astype(Array::scalar(float_constant(&c[0])), q.dtype())?;
    // Half-precision queries are scaled before the product, so the scores cannot overflow where
    // the scaled ones would not; wider ones after it, where the scaling fuses into the softmax.
    let scale_first = q.dtype().size() < 4;
    let mut queries = if scale_first { ops::multiply(&q, &scale)? } else { q.clone() };
    if repeats > 1 {
        queries = ops::reshape(&queries, &[batch as i64, kv_heads as i64, repeats as i64, length as i64, features as i64])?;
        k = ops::expand_dims(&k, &[2])?;
        v = ops::expand_dims(&v, &[2])?;
    }
    let mut scores = ops::matmul(&queries, ops::swapaxes(&k, -1, -2)?)?;
    if !scale_first {
        scores = ops::multiply(scores, &scale)?;
    }
    if c[1] == Constant::from("causal") {
        let rows = ops::add(ops::arange(0.0, length as f64, 1.0, Dtype::I32)?, keys as i64 - length as i64)?;
        let columns = ops::arange(0.0, keys as f64, 1.0, Dtype::I32)?;
        mask = Some(ops::greater_equal(ops::expand_dims(rows, &[1])?, ops::expand_dims(columns, &[0])?)?);
    }
    if let Some(m) = mask {
        let m = if repeats > 1 && m.ndim() >= 3 {
            let head_axis = m.ndim() as i64 - 3;
            if m.shape()[head_axis as usize] == 1 {
                ops::expand_dims(&m, &[-3])?
            } else {
                ops::unflatten(&m, head_axis, &[kv_heads as i64, repeats as i64])?
            }
        } else {
            m
        };
        scores = if m.dtype() == Dtype::Bool {
            ops::where_(&m, &scores, ops::astype(Array::scalar(-ops::derived::largest_finite(scores.dtype())), scores.dtype())?)?
        } else {
            ops::add(&scores, &m)?
        };
    }
    if let Some(s) = sinks {
        let mut column = ops::expand_dims(s, &[0, 2, 3])?;
        if repeats > 1 {
            column = ops::unflatten(&column, 1, &[kv_heads as i64, repeats as i64])?;
        }
        let mut shape = scores.shape().to_vec();
        *shape.last_mut().expect("scores have 4 or 5 axes") = 1;
        column = ops::broadcast_to(ops::astype(column, scores.dtype())?, &shape)?;
        scores = ops::concatenate(&[column, scores], -1)?;
    }
    let mut weights = ops::softmax(&scores, Some(&[-1]), true)?;
    if sinks.is_some() {
        weights = ops::slice_axis(&weights, -1, 1, keys as i64 + 1)?;
    }
    let out = ops::matmul(&weights, &v)?;
    let out = if repeats > 1 {
        ops::reshape(out, &[batch as i64, heads as i64, length as i64, v.shape()[v.ndim() - 1] as i64])?
    } else {
        out
    };
    Ok(vec![out])
}
