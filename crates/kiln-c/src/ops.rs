//! The op set, one C function per op, generated from one table (`c_ops!` below): each entry
//! names the C function, its arguments in mlx-c's order, and the Rust op it calls, so the C ops
//! cannot drift from the Rust ones (a changed Rust signature stops the build). Every function
//! writes its result through `res` (its first argument) and runs on the stream `s` (its last).
//!
//! The same table yields [`op_declarations`], the C prototypes the header's op section is
//! printed from (cbindgen does not expand macros; `tests/header.rs` joins the two).

use crate::array::{kiln_array, kiln_dtype};
use crate::device::{kiln_stream, stream};
use crate::error::{c_error, status};
use crate::handle::{set, slice, Handle};
use crate::string::text;
use crate::vector::kiln_vector_array;
use kiln::ops::{self, SliceSpec, SplitSpec, TensordotAxes};
use kiln::{random, Array};
use std::ffi::{c_char, c_int};

/// A result handle type of an op: an array, or a vector of arrays.
trait Output: Handle {
    /// What the Rust op returns.
    type Rust;
    /// Stores a result in the handle `res` points at.
    unsafe fn store(res: *mut Self, v: Self::Rust) -> kiln::Result<()>;
}

impl Output for kiln_array {
    type Rust = Array;
    unsafe fn store(res: *mut Self, v: Array) -> kiln::Result<()> {
        unsafe { crate::array::set_array(res, v) }
    }
}

impl Output for kiln_vector_array {
    type Rust = Vec<Array>;
    unsafe fn store(res: *mut Self, v: Vec<Array>) -> kiln::Result<()> {
        unsafe { set(res, v) }
    }
}

/// One C function of the op table, as the header declares it.
pub struct Declaration {
    /// The C function's name.
    pub name: &'static str,
    /// Its doc comment, line by line.
    pub docs: &'static [&'static str],
    /// The result handle's type.
    pub result: &'static str,
    /// The arguments between `res` and `s`: (name, Rust type).
    pub args: &'static [(&'static str, &'static str)],
}

impl Declaration {
    /// The C prototype with its doc comment, in the header's style.
    pub fn to_c(&self) -> String {
        let mut out = String::from("/**\n");
        for line in self.docs {
            out.push_str(&format!(" *{}\n", line.trim_end()));
        }
        out.push_str(" */\n");
        let mut args = vec![format!("{} *res", self.result)];
        args.extend(self.args.iter().map(|(name, ty)| match c_type(ty) {
            pointer if pointer.ends_with('*') => format!("{pointer}{name}"),
            plain => format!("{plain} {name}"),
        }));
        args.push("kiln_stream s".to_string());
        out.push_str(&format!("int {}({});\n", self.name, args.join(", ")));
        out
    }
}

/// The C type of an argument type of the table.
fn c_type(rust: &str) -> &'static str {
    match rust {
        "kiln_array" => "kiln_array",
        "kiln_vector_array" => "kiln_vector_array",
        "kiln_dtype" => "kiln_dtype",
        "* const c_int" | "*const c_int" => "const int *",
        "* const c_char" | "*const c_char" => "const char *",
        "c_int" => "int",
        "usize" => "size_t",
        "bool" => "bool",
        "f32" => "float",
        "f64" => "double",
        other => panic!("the op table uses a type the header printer does not know: {other}"),
    }
}

/// Axes or other int lists from C.
///
/// # Safety
/// `p` is NULL or valid for `n` reads.
unsafe fn ints(p: *const c_int, n: usize, what: &str) -> kiln::Result<Vec<i64>> {
    Ok(unsafe { slice(p, n, what) }?.iter().map(|&v| v as i64).collect())
}

/// A count from a C int, which must not be negative.
fn count(v: c_int, what: &str) -> kiln::Result<usize> {
    usize::try_from(v).map_err(|_| c_error("", format!("{what} is {v}; it must not be negative")))
}

/// Per-axis slices from C start/stop/stride lists (one entry per axis, leading axes).
fn slice_specs(start: &[i64], stop: &[i64], strides: &[i64]) -> kiln::Result<Vec<SliceSpec>> {
    if start.len() != stop.len() || (!strides.is_empty() && strides.len() != start.len()) {
        return Err(c_error(
            "",
            format!("start, stop and strides have {}, {} and {} entries; give one per axis (strides may be empty)", start.len(), stop.len(), strides.len()),
        ));
    }
    Ok((0..start.len())
        .map(|i| SliceSpec { start: Some(start[i]), stop: Some(stop[i]), step: strides.get(i).copied().unwrap_or(1) })
        .collect())
}

/// Rounds to `decimals` digits after the point (before it when negative), as mlx's `round`.
fn round(a: Array, decimals: c_int) -> kiln::Result<Array> {
    if decimals == 0 {
        return ops::round(a);
    }
    let scale = 10f64.powi(decimals);
    ops::divide(ops::round(ops::multiply(a, scale)?)?, scale)
}

macro_rules! arr {
    ($a:ident) => {
        unsafe { crate::array::array($a, stringify!($a)) }?
    };
}
macro_rules! opt {
    ($a:ident) => {
        unsafe { crate::array::optional_array($a) }
    };
}
macro_rules! vecs {
    ($v:ident) => {
        unsafe { crate::vector::arrays($v, stringify!($v)) }?
    };
}
macro_rules! ints {
    ($p:ident, $n:ident) => {
        unsafe { ints($p, $n, stringify!($p)) }?
    };
}
macro_rules! shp {
    ($p:ident, $n:ident) => {
        unsafe { crate::array::shape($p, $n, stringify!($p)) }?
    };
}
macro_rules! dt {
    ($d:ident) => {
        crate::array::dtype($d)?
    };
}
macro_rules! cnt {
    ($v:ident) => {
        count($v, stringify!($v))?
    };
}

macro_rules! c_ops {
    ($($(#[doc = $doc:literal])* fn $name:ident($($arg:ident: $ty:ty),*) -> $out:ident = $body:expr;)*) => {
        $(
            $(#[doc = $doc])*
            #[no_mangle]
            pub unsafe extern "C" fn $name(res: *mut $out, $($arg: $ty,)* s: kiln_stream) -> c_int {
                status(stringify!($name), || {
                    let stream = unsafe { stream(s, "s") }?;
                    let run = || -> kiln::Result<<$out as Output>::Rust> { $body };
                    let v = kiln::with_stream(stream, run)??;
                    unsafe { <$out as Output>::store(res, v) }
                })
            }
        )*

        /// The C declarations of the op table, in its order.
        pub fn op_declarations() -> Vec<Declaration> {
            vec![$(Declaration {
                name: stringify!($name),
                docs: &[$($doc),*],
                result: stringify!($out),
                args: &[$((stringify!($arg), stringify!($ty))),*],
            }),*]
        }
    };
}

c_ops! {
    /// |a|.
    fn kiln_abs(a: kiln_array) -> kiln_array = ops::abs(arr!(a));
    /// -a.
    fn kiln_negative(a: kiln_array) -> kiln_array = ops::negative(arr!(a));
    /// -1, 0 or 1 by the sign of a.
    fn kiln_sign(a: kiln_array) -> kiln_array = ops::sign(arr!(a));
    /// e^a.
    fn kiln_exp(a: kiln_array) -> kiln_array = ops::exp(arr!(a));
    /// e^a - 1, accurate near 0.
    fn kiln_expm1(a: kiln_array) -> kiln_array = ops::expm1(arr!(a));
    /// Natural logarithm.
    fn kiln_log(a: kiln_array) -> kiln_array = ops::log(arr!(a));
    /// ln(1 + a), accurate near 0.
    fn kiln_log1p(a: kiln_array) -> kiln_array = ops::log1p(arr!(a));
    /// Base-2 logarithm.
    fn kiln_log2(a: kiln_array) -> kiln_array = ops::log2(arr!(a));
    /// Base-10 logarithm.
    fn kiln_log10(a: kiln_array) -> kiln_array = ops::log10(arr!(a));
    /// Square root.
    fn kiln_sqrt(a: kiln_array) -> kiln_array = ops::sqrt(arr!(a));
    /// 1 / sqrt(a).
    fn kiln_rsqrt(a: kiln_array) -> kiln_array = ops::rsqrt(arr!(a));
    /// a * a.
    fn kiln_square(a: kiln_array) -> kiln_array = ops::square(arr!(a));
    /// 1 / a.
    fn kiln_reciprocal(a: kiln_array) -> kiln_array = ops::reciprocal(arr!(a));
    /// Sine.
    fn kiln_sin(a: kiln_array) -> kiln_array = ops::sin(arr!(a));
    /// Cosine.
    fn kiln_cos(a: kiln_array) -> kiln_array = ops::cos(arr!(a));
    /// Tangent.
    fn kiln_tan(a: kiln_array) -> kiln_array = ops::tan(arr!(a));
    /// Inverse sine.
    fn kiln_arcsin(a: kiln_array) -> kiln_array = ops::arcsin(arr!(a));
    /// Inverse cosine.
    fn kiln_arccos(a: kiln_array) -> kiln_array = ops::arccos(arr!(a));
    /// Inverse tangent.
    fn kiln_arctan(a: kiln_array) -> kiln_array = ops::arctan(arr!(a));
    /// Hyperbolic sine.
    fn kiln_sinh(a: kiln_array) -> kiln_array = ops::sinh(arr!(a));
    /// Hyperbolic cosine.
    fn kiln_cosh(a: kiln_array) -> kiln_array = ops::cosh(arr!(a));
    /// Hyperbolic tangent.
    fn kiln_tanh(a: kiln_array) -> kiln_array = ops::tanh(arr!(a));
    /// Inverse hyperbolic sine.
    fn kiln_arcsinh(a: kiln_array) -> kiln_array = ops::arcsinh(arr!(a));
    /// Inverse hyperbolic cosine.
    fn kiln_arccosh(a: kiln_array) -> kiln_array = ops::arccosh(arr!(a));
    /// Inverse hyperbolic tangent.
    fn kiln_arctanh(a: kiln_array) -> kiln_array = ops::arctanh(arr!(a));
    /// The error function.
    fn kiln_erf(a: kiln_array) -> kiln_array = ops::erf(arr!(a));
    /// The inverse error function.
    fn kiln_erfinv(a: kiln_array) -> kiln_array = ops::erfinv(arr!(a));
    /// 1 / (1 + e^-a).
    fn kiln_sigmoid(a: kiln_array) -> kiln_array = ops::sigmoid(arr!(a));
    /// Rounds toward -inf.
    fn kiln_floor(a: kiln_array) -> kiln_array = ops::floor(arr!(a));
    /// Rounds toward +inf.
    fn kiln_ceil(a: kiln_array) -> kiln_array = ops::ceil(arr!(a));
    /// Rounds to `decimals` digits (ties to even).
    fn kiln_round(a: kiln_array, decimals: c_int) -> kiln_array = round(arr!(a), decimals);
    /// a == 0, as bool.
    fn kiln_logical_not(a: kiln_array) -> kiln_array = ops::logical_not(arr!(a));
    /// Whether each element is NaN.
    fn kiln_isnan(a: kiln_array) -> kiln_array = ops::isnan(arr!(a));
    /// Whether each element is +inf or -inf.
    fn kiln_isinf(a: kiln_array) -> kiln_array = ops::isinf(arr!(a));
    /// Whether each element is +inf.
    fn kiln_isposinf(a: kiln_array) -> kiln_array = ops::isposinf(arr!(a));
    /// Whether each element is -inf.
    fn kiln_isneginf(a: kiln_array) -> kiln_array = ops::isneginf(arr!(a));
    /// Whether each element is finite.
    fn kiln_isfinite(a: kiln_array) -> kiln_array = ops::isfinite(arr!(a));
    /// Bitwise not (integers and bool).
    fn kiln_bitwise_invert(a: kiln_array) -> kiln_array = ops::bitwise_invert(arr!(a));
    /// a, cut off from gradients.
    fn kiln_stop_gradient(a: kiln_array) -> kiln_array = kiln::stop_gradient(&arr!(a));
    /// A copy of a.
    fn kiln_copy(a: kiln_array) -> kiln_array = ops::copy(arr!(a));
    /// a converted to `dtype`.
    fn kiln_astype(a: kiln_array, dtype: kiln_dtype) -> kiln_array = ops::astype(arr!(a), dt!(dtype));

    /// a + b (broadcasting, with mlx's type promotion).
    fn kiln_add(a: kiln_array, b: kiln_array) -> kiln_array = ops::add(arr!(a), arr!(b));
    /// a - b.
    fn kiln_subtract(a: kiln_array, b: kiln_array) -> kiln_array = ops::subtract(arr!(a), arr!(b));
    /// a * b.
    fn kiln_multiply(a: kiln_array, b: kiln_array) -> kiln_array = ops::multiply(arr!(a), arr!(b));
    /// a / b, true division (integers give float32).
    fn kiln_divide(a: kiln_array, b: kiln_array) -> kiln_array = ops::divide(arr!(a), arr!(b));
    /// floor(a / b).
    fn kiln_floor_divide(a: kiln_array, b: kiln_array) -> kiln_array = ops::floor_divide(arr!(a), arr!(b));
    /// a mod b with the sign of b.
    fn kiln_remainder(a: kiln_array, b: kiln_array) -> kiln_array = ops::remainder(arr!(a), arr!(b));
    /// a ** b.
    fn kiln_power(a: kiln_array, b: kiln_array) -> kiln_array = ops::power(arr!(a), arr!(b));
    /// Elementwise maximum (NaN propagates).
    fn kiln_maximum(a: kiln_array, b: kiln_array) -> kiln_array = ops::maximum(arr!(a), arr!(b));
    /// Elementwise minimum (NaN propagates).
    fn kiln_minimum(a: kiln_array, b: kiln_array) -> kiln_array = ops::minimum(arr!(a), arr!(b));
    /// atan2(a, b).
    fn kiln_arctan2(a: kiln_array, b: kiln_array) -> kiln_array = ops::arctan2(arr!(a), arr!(b));
    /// log(e^a + e^b) without overflow.
    fn kiln_logaddexp(a: kiln_array, b: kiln_array) -> kiln_array = ops::logaddexp(arr!(a), arr!(b));
    /// a == b.
    fn kiln_equal(a: kiln_array, b: kiln_array) -> kiln_array = ops::equal(arr!(a), arr!(b));
    /// a != b.
    fn kiln_not_equal(a: kiln_array, b: kiln_array) -> kiln_array = ops::not_equal(arr!(a), arr!(b));
    /// a < b.
    fn kiln_less(a: kiln_array, b: kiln_array) -> kiln_array = ops::less(arr!(a), arr!(b));
    /// a <= b.
    fn kiln_less_equal(a: kiln_array, b: kiln_array) -> kiln_array = ops::less_equal(arr!(a), arr!(b));
    /// a > b.
    fn kiln_greater(a: kiln_array, b: kiln_array) -> kiln_array = ops::greater(arr!(a), arr!(b));
    /// a >= b.
    fn kiln_greater_equal(a: kiln_array, b: kiln_array) -> kiln_array = ops::greater_equal(arr!(a), arr!(b));
    /// a and b, as bools.
    fn kiln_logical_and(a: kiln_array, b: kiln_array) -> kiln_array = ops::logical_and(arr!(a), arr!(b));
    /// a or b, as bools.
    fn kiln_logical_or(a: kiln_array, b: kiln_array) -> kiln_array = ops::logical_or(arr!(a), arr!(b));
    /// Bitwise and.
    fn kiln_bitwise_and(a: kiln_array, b: kiln_array) -> kiln_array = ops::bitwise_and(arr!(a), arr!(b));
    /// Bitwise or.
    fn kiln_bitwise_or(a: kiln_array, b: kiln_array) -> kiln_array = ops::bitwise_or(arr!(a), arr!(b));
    /// Bitwise xor.
    fn kiln_bitwise_xor(a: kiln_array, b: kiln_array) -> kiln_array = ops::bitwise_xor(arr!(a), arr!(b));
    /// a << b.
    fn kiln_left_shift(a: kiln_array, b: kiln_array) -> kiln_array = ops::left_shift(arr!(a), arr!(b));
    /// a >> b.
    fn kiln_right_shift(a: kiln_array, b: kiln_array) -> kiln_array = ops::right_shift(arr!(a), arr!(b));
    /// condition ? x : y, elementwise with broadcasting.
    fn kiln_where(condition: kiln_array, x: kiln_array, y: kiln_array) -> kiln_array = ops::where_(arr!(condition), arr!(x), arr!(y));
    /// a clipped to [a_min, a_max]; either bound may be an empty handle (no bound).
    fn kiln_clip(a: kiln_array, a_min: kiln_array, a_max: kiln_array) -> kiln_array = {
        let (lo, hi) = (opt!(a_min), opt!(a_max));
        ops::clip(arr!(a), lo.as_ref().map(|x| x as &dyn ops::AsArray), hi.as_ref().map(|x| x as &dyn ops::AsArray))
    };

    /// Matrix product with numpy's rules (batches broadcast; 1-d operands are vectors).
    fn kiln_matmul(a: kiln_array, b: kiln_array) -> kiln_array = ops::matmul(arr!(a), arr!(b));
    /// alpha * (a @ b) + beta * c.
    fn kiln_addmm(c: kiln_array, a: kiln_array, b: kiln_array, alpha: f32, beta: f32) -> kiln_array =
        ops::addmm(arr!(c), arr!(a), arr!(b), alpha as f64, beta as f64);
    /// Outer product of the flattened a and b.
    fn kiln_outer(a: kiln_array, b: kiln_array) -> kiln_array = ops::outer(arr!(a), arr!(b));
    /// Inner product over the last axes.
    fn kiln_inner(a: kiln_array, b: kiln_array) -> kiln_array = ops::inner(arr!(a), arr!(b));
    /// Sum of products over the last `axis` axes of a and the first of b.
    fn kiln_tensordot_axis(a: kiln_array, b: kiln_array, axis: c_int) -> kiln_array =
        ops::tensordot(arr!(a), arr!(b), TensordotAxes::Count(cnt!(axis)));
    /// Einstein summation, e.g. "ij,jk->ik".
    fn kiln_einsum(subscripts: *const c_char, operands: kiln_vector_array) -> kiln_array =
        ops::einsum(unsafe { text(subscripts, "subscripts") }?, &vecs!(operands));

    /// Sum of all elements.
    fn kiln_sum(a: kiln_array, keepdims: bool) -> kiln_array = ops::sum(arr!(a), None, keepdims);
    /// Sum over `axes`.
    fn kiln_sum_axes(a: kiln_array, axes: *const c_int, axes_num: usize, keepdims: bool) -> kiln_array = ops::sum(arr!(a), Some(&ints!(axes, axes_num)), keepdims);
    /// Sum over `axis`.
    fn kiln_sum_axis(a: kiln_array, axis: c_int, keepdims: bool) -> kiln_array = ops::sum(arr!(a), Some(&[axis as i64]), keepdims);
    /// Product of all elements.
    fn kiln_prod(a: kiln_array, keepdims: bool) -> kiln_array = ops::prod(arr!(a), None, keepdims);
    /// Product over `axes`.
    fn kiln_prod_axes(a: kiln_array, axes: *const c_int, axes_num: usize, keepdims: bool) -> kiln_array = ops::prod(arr!(a), Some(&ints!(axes, axes_num)), keepdims);
    /// Product over `axis`.
    fn kiln_prod_axis(a: kiln_array, axis: c_int, keepdims: bool) -> kiln_array = ops::prod(arr!(a), Some(&[axis as i64]), keepdims);
    /// Maximum of all elements.
    fn kiln_max(a: kiln_array, keepdims: bool) -> kiln_array = ops::max(arr!(a), None, keepdims);
    /// Maximum over `axes`.
    fn kiln_max_axes(a: kiln_array, axes: *const c_int, axes_num: usize, keepdims: bool) -> kiln_array = ops::max(arr!(a), Some(&ints!(axes, axes_num)), keepdims);
    /// Maximum over `axis`.
    fn kiln_max_axis(a: kiln_array, axis: c_int, keepdims: bool) -> kiln_array = ops::max(arr!(a), Some(&[axis as i64]), keepdims);
    /// Minimum of all elements.
    fn kiln_min(a: kiln_array, keepdims: bool) -> kiln_array = ops::min(arr!(a), None, keepdims);
    /// Minimum over `axes`.
    fn kiln_min_axes(a: kiln_array, axes: *const c_int, axes_num: usize, keepdims: bool) -> kiln_array = ops::min(arr!(a), Some(&ints!(axes, axes_num)), keepdims);
    /// Minimum over `axis`.
    fn kiln_min_axis(a: kiln_array, axis: c_int, keepdims: bool) -> kiln_array = ops::min(arr!(a), Some(&[axis as i64]), keepdims);
    /// Whether every element is non-zero.
    fn kiln_all(a: kiln_array, keepdims: bool) -> kiln_array = ops::all(arr!(a), None, keepdims);
    /// Whether every element over `axes` is non-zero.
    fn kiln_all_axes(a: kiln_array, axes: *const c_int, axes_num: usize, keepdims: bool) -> kiln_array = ops::all(arr!(a), Some(&ints!(axes, axes_num)), keepdims);
    /// Whether any element is non-zero.
    fn kiln_any(a: kiln_array, keepdims: bool) -> kiln_array = ops::any(arr!(a), None, keepdims);
    /// Whether any element over `axes` is non-zero.
    fn kiln_any_axes(a: kiln_array, axes: *const c_int, axes_num: usize, keepdims: bool) -> kiln_array = ops::any(arr!(a), Some(&ints!(axes, axes_num)), keepdims);
    /// Mean of all elements.
    fn kiln_mean(a: kiln_array, keepdims: bool) -> kiln_array = ops::mean(arr!(a), None, keepdims);
    /// Mean over `axes`.
    fn kiln_mean_axes(a: kiln_array, axes: *const c_int, axes_num: usize, keepdims: bool) -> kiln_array = ops::mean(arr!(a), Some(&ints!(axes, axes_num)), keepdims);
    /// Mean over `axis`.
    fn kiln_mean_axis(a: kiln_array, axis: c_int, keepdims: bool) -> kiln_array = ops::mean(arr!(a), Some(&[axis as i64]), keepdims);
    /// Variance of all elements, dividing by N - ddof.
    fn kiln_var(a: kiln_array, keepdims: bool, ddof: c_int) -> kiln_array = ops::var(arr!(a), None, keepdims, cnt!(ddof));
    /// Variance over `axes`.
    fn kiln_var_axes(a: kiln_array, axes: *const c_int, axes_num: usize, keepdims: bool, ddof: c_int) -> kiln_array = ops::var(arr!(a), Some(&ints!(axes, axes_num)), keepdims, cnt!(ddof));
    /// Standard deviation of all elements, dividing by N - ddof.
    fn kiln_std(a: kiln_array, keepdims: bool, ddof: c_int) -> kiln_array = ops::std(arr!(a), None, keepdims, cnt!(ddof));
    /// Standard deviation over `axes`.
    fn kiln_std_axes(a: kiln_array, axes: *const c_int, axes_num: usize, keepdims: bool, ddof: c_int) -> kiln_array = ops::std(arr!(a), Some(&ints!(axes, axes_num)), keepdims, cnt!(ddof));
    /// log(sum(exp(a))) over all elements, without overflow.
    fn kiln_logsumexp(a: kiln_array, keepdims: bool) -> kiln_array = ops::logsumexp(arr!(a), None, keepdims);
    /// log(sum(exp(a))) over `axes`.
    fn kiln_logsumexp_axes(a: kiln_array, axes: *const c_int, axes_num: usize, keepdims: bool) -> kiln_array = ops::logsumexp(arr!(a), Some(&ints!(axes, axes_num)), keepdims);
    /// Softmax over all elements (`precise`: accumulate low-precision inputs in float32).
    fn kiln_softmax(a: kiln_array, precise: bool) -> kiln_array = ops::softmax(arr!(a), None, precise);
    /// Softmax over `axes`.
    fn kiln_softmax_axes(a: kiln_array, axes: *const c_int, axes_num: usize, precise: bool) -> kiln_array = ops::softmax(arr!(a), Some(&ints!(axes, axes_num)), precise);
    /// Softmax over `axis`.
    fn kiln_softmax_axis(a: kiln_array, axis: c_int, precise: bool) -> kiln_array = ops::softmax(arr!(a), Some(&[axis as i64]), precise);
    /// Index of the maximum of the flattened array.
    fn kiln_argmax(a: kiln_array, keepdims: bool) -> kiln_array = ops::argmax(arr!(a), None, keepdims);
    /// Index of the maximum along `axis`.
    fn kiln_argmax_axis(a: kiln_array, axis: c_int, keepdims: bool) -> kiln_array = ops::argmax(arr!(a), Some(axis as i64), keepdims);
    /// Index of the minimum of the flattened array.
    fn kiln_argmin(a: kiln_array, keepdims: bool) -> kiln_array = ops::argmin(arr!(a), None, keepdims);
    /// Index of the minimum along `axis`.
    fn kiln_argmin_axis(a: kiln_array, axis: c_int, keepdims: bool) -> kiln_array = ops::argmin(arr!(a), Some(axis as i64), keepdims);

    /// Cumulative sum along `axis` (from the end when `reverse`; exclusive unless `inclusive`).
    fn kiln_cumsum(a: kiln_array, axis: c_int, reverse: bool, inclusive: bool) -> kiln_array = ops::cumsum(arr!(a), Some(axis as i64), reverse, inclusive);
    /// Cumulative product along `axis`.
    fn kiln_cumprod(a: kiln_array, axis: c_int, reverse: bool, inclusive: bool) -> kiln_array = ops::cumprod(arr!(a), Some(axis as i64), reverse, inclusive);
    /// Running maximum along `axis`.
    fn kiln_cummax(a: kiln_array, axis: c_int, reverse: bool, inclusive: bool) -> kiln_array = ops::cummax(arr!(a), Some(axis as i64), reverse, inclusive);
    /// Running minimum along `axis`.
    fn kiln_cummin(a: kiln_array, axis: c_int, reverse: bool, inclusive: bool) -> kiln_array = ops::cummin(arr!(a), Some(axis as i64), reverse, inclusive);
    /// Running log-sum-exp along `axis`, computed in log space (integers in float).
    fn kiln_logcumsumexp(a: kiln_array, axis: c_int, reverse: bool, inclusive: bool) -> kiln_array = ops::logcumsumexp(arr!(a), Some(axis as i64), reverse, inclusive);
    /// The flattened array, sorted (NaNs last).
    fn kiln_sort(a: kiln_array) -> kiln_array = ops::sort(arr!(a), None);
    /// Sorted along `axis`.
    fn kiln_sort_axis(a: kiln_array, axis: c_int) -> kiln_array = ops::sort(arr!(a), Some(axis as i64));
    /// Indices that sort the flattened array (stable).
    fn kiln_argsort(a: kiln_array) -> kiln_array = ops::argsort(arr!(a), None);
    /// Indices that sort along `axis` (stable).
    fn kiln_argsort_axis(a: kiln_array, axis: c_int) -> kiln_array = ops::argsort(arr!(a), Some(axis as i64));
    /// The flattened array partitioned around its `kth` element.
    fn kiln_partition(a: kiln_array, kth: c_int) -> kiln_array = ops::partition(arr!(a), kth as i64, None);
    /// Partitioned along `axis` around the `kth` element.
    fn kiln_partition_axis(a: kiln_array, kth: c_int, axis: c_int) -> kiln_array = ops::partition(arr!(a), kth as i64, Some(axis as i64));
    /// Indices partitioning the flattened array around its `kth` element.
    fn kiln_argpartition(a: kiln_array, kth: c_int) -> kiln_array = ops::argpartition(arr!(a), kth as i64, None);
    /// Indices partitioning along `axis` around the `kth` element.
    fn kiln_argpartition_axis(a: kiln_array, kth: c_int, axis: c_int) -> kiln_array = ops::argpartition(arr!(a), kth as i64, Some(axis as i64));
    /// The `k` largest elements of the flattened array.
    fn kiln_topk(a: kiln_array, k: c_int) -> kiln_array = ops::topk(arr!(a), cnt!(k), None);
    /// The `k` largest elements along `axis`.
    fn kiln_topk_axis(a: kiln_array, k: c_int, axis: c_int) -> kiln_array = ops::topk(arr!(a), cnt!(k), Some(axis as i64));

    /// a with a new shape of the same size (one entry may be -1).
    fn kiln_reshape(a: kiln_array, shape: *const c_int, shape_num: usize) -> kiln_array = ops::reshape(arr!(a), &ints!(shape, shape_num));
    /// Axes start_axis..=end_axis merged into one.
    fn kiln_flatten(a: kiln_array, start_axis: c_int, end_axis: c_int) -> kiln_array = ops::flatten(arr!(a), start_axis as i64, end_axis as i64);
    /// Axis `axis` split into `shape`.
    fn kiln_unflatten(a: kiln_array, axis: c_int, shape: *const c_int, shape_num: usize) -> kiln_array = ops::unflatten(arr!(a), axis as i64, &ints!(shape, shape_num));
    /// a without its axes of size 1.
    fn kiln_squeeze(a: kiln_array) -> kiln_array = ops::squeeze(arr!(a), None);
    /// a without `axes` (each of size 1).
    fn kiln_squeeze_axes(a: kiln_array, axes: *const c_int, axes_num: usize) -> kiln_array = ops::squeeze(arr!(a), Some(&ints!(axes, axes_num)));
    /// a with a new axis of size 1 at `axis`.
    fn kiln_expand_dims(a: kiln_array, axis: c_int) -> kiln_array = ops::expand_dims(arr!(a), &[axis as i64]);
    /// a with new axes of size 1 at `axes`.
    fn kiln_expand_dims_axes(a: kiln_array, axes: *const c_int, axes_num: usize) -> kiln_array = ops::expand_dims(arr!(a), &ints!(axes, axes_num));
    /// a with its axes reversed.
    fn kiln_transpose(a: kiln_array) -> kiln_array = ops::transpose(arr!(a), None);
    /// a with its axes in the order `axes`.
    fn kiln_transpose_axes(a: kiln_array, axes: *const c_int, axes_num: usize) -> kiln_array = ops::transpose(arr!(a), Some(&ints!(axes, axes_num)));
    /// a with two axes swapped.
    fn kiln_swapaxes(a: kiln_array, axis1: c_int, axis2: c_int) -> kiln_array = ops::swapaxes(arr!(a), axis1 as i64, axis2 as i64);
    /// a with axis `source` moved to `destination`.
    fn kiln_moveaxis(a: kiln_array, source: c_int, destination: c_int) -> kiln_array = ops::moveaxis(arr!(a), source as i64, destination as i64);
    /// a broadcast to `shape`.
    fn kiln_broadcast_to(a: kiln_array, shape: *const c_int, shape_num: usize) -> kiln_array = ops::broadcast_to(arr!(a), &shp!(shape, shape_num));
    /// The arrays broadcast to their common shape.
    fn kiln_broadcast_arrays(inputs: kiln_vector_array) -> kiln_vector_array = ops::broadcast_arrays(&vecs!(inputs));
    /// a[start:stop:strides] on the leading axes (strides may be empty: all 1).
    fn kiln_slice(a: kiln_array, start: *const c_int, start_num: usize, stop: *const c_int, stop_num: usize, strides: *const c_int, strides_num: usize) -> kiln_array =
        ops::slice(arr!(a), &slice_specs(&ints!(start, start_num), &ints!(stop, stop_num), &ints!(strides, strides_num))?);
    /// A copy of src with src[start:stop:strides] replaced by update.
    fn kiln_slice_update(src: kiln_array, update: kiln_array, start: *const c_int, start_num: usize, stop: *const c_int, stop_num: usize, strides: *const c_int, strides_num: usize) -> kiln_array =
        ops::slice_update(arr!(src), arr!(update), &slice_specs(&ints!(start, start_num), &ints!(stop, stop_num), &ints!(strides, strides_num))?);

    /// The arrays joined along axis 0.
    fn kiln_concatenate(arrays: kiln_vector_array) -> kiln_array = ops::concatenate(&vecs!(arrays), 0);
    /// The arrays joined along `axis`.
    fn kiln_concatenate_axis(arrays: kiln_vector_array, axis: c_int) -> kiln_array = ops::concatenate(&vecs!(arrays), axis as i64);
    /// The arrays stacked along a new axis 0.
    fn kiln_stack(arrays: kiln_vector_array) -> kiln_array = ops::stack(&vecs!(arrays), 0);
    /// The arrays stacked along a new axis `axis`.
    fn kiln_stack_axis(arrays: kiln_vector_array, axis: c_int) -> kiln_array = ops::stack(&vecs!(arrays), axis as i64);
    /// a split into `num_splits` equal parts along `axis`.
    fn kiln_split(a: kiln_array, num_splits: c_int, axis: c_int) -> kiln_vector_array = ops::split(arr!(a), SplitSpec::Sections(cnt!(num_splits)), axis as i64);
    /// a split before each of `indices` along `axis`.
    fn kiln_split_sections(a: kiln_array, indices: *const c_int, indices_num: usize, axis: c_int) -> kiln_vector_array =
        ops::split(arr!(a), SplitSpec::Indices(ints!(indices, indices_num)), axis as i64);
    /// a padded on every axis with low_pad[i] elements before and high_pad[i] after, of pad_value.
    fn kiln_pad(a: kiln_array, low_pad: *const c_int, low_pad_num: usize, high_pad: *const c_int, high_pad_num: usize, pad_value: kiln_array) -> kiln_array = {
        let (low, high) = (shp!(low_pad, low_pad_num), shp!(high_pad, high_pad_num));
        if low.len() != high.len() {
            return Err(c_error("", format!("low_pad has {} entries and high_pad {}; give one per axis", low.len(), high.len())));
        }
        let widths: Vec<(usize, usize)> = low.into_iter().zip(high).collect();
        ops::pad(arr!(a), &widths, arr!(pad_value))
    };
    /// a repeated reps[i] times along each axis.
    fn kiln_tile(a: kiln_array, reps: *const c_int, reps_num: usize) -> kiln_array = ops::tile(arr!(a), &shp!(reps, reps_num));
    /// Each element of the flattened a repeated `repeats` times.
    fn kiln_repeat(a: kiln_array, repeats: c_int) -> kiln_array = ops::repeat(arr!(a), cnt!(repeats), None);
    /// Each element repeated `repeats` times along `axis`.
    fn kiln_repeat_axis(a: kiln_array, repeats: c_int, axis: c_int) -> kiln_array = ops::repeat(arr!(a), cnt!(repeats), Some(axis as i64));
    /// The lower triangle (below diagonal `k`), zeros above.
    fn kiln_tril(a: kiln_array, k: c_int) -> kiln_array = ops::tril(arr!(a), k as i64);
    /// The upper triangle (above diagonal `k`), zeros below.
    fn kiln_triu(a: kiln_array, k: c_int) -> kiln_array = ops::triu(arr!(a), k as i64);
    /// Elements of the flattened a at `indices`.
    fn kiln_take(a: kiln_array, indices: kiln_array) -> kiln_array = ops::take(arr!(a), arr!(indices), None);
    /// Slices of a along `axis` at `indices`.
    fn kiln_take_axis(a: kiln_array, indices: kiln_array, axis: c_int) -> kiln_array = ops::take(arr!(a), arr!(indices), Some(axis as i64));
    /// Elements of a at `indices` along `axis` (indices shaped as a).
    fn kiln_take_along_axis(a: kiln_array, indices: kiln_array, axis: c_int) -> kiln_array = ops::take_along_axis(arr!(a), arr!(indices), Some(axis as i64));
    /// A copy of a with `values` written at `indices` along `axis`.
    fn kiln_put_along_axis(a: kiln_array, indices: kiln_array, values: kiln_array, axis: c_int) -> kiln_array =
        ops::put_along_axis(arr!(a), arr!(indices), arr!(values), Some(axis as i64));
    /// Slices of a of `slice_sizes` at the positions `indices` give on `axes`.
    fn kiln_gather(a: kiln_array, indices: kiln_vector_array, axes: *const c_int, axes_num: usize, slice_sizes: *const c_int, slice_sizes_num: usize) -> kiln_array =
        ops::gather(arr!(a), &vecs!(indices), &ints!(axes, axes_num), &shp!(slice_sizes, slice_sizes_num));
    /// A copy of a with `updates` written at `indices` on `axes` (the last duplicate wins).
    fn kiln_scatter(a: kiln_array, indices: kiln_vector_array, updates: kiln_array, axes: *const c_int, axes_num: usize) -> kiln_array =
        ops::scatter(arr!(a), &vecs!(indices), arr!(updates), &ints!(axes, axes_num));
    /// As kiln_scatter, adding (duplicates accumulate).
    fn kiln_scatter_add(a: kiln_array, indices: kiln_vector_array, updates: kiln_array, axes: *const c_int, axes_num: usize) -> kiln_array =
        ops::scatter_add(arr!(a), &vecs!(indices), arr!(updates), &ints!(axes, axes_num));
    /// As kiln_scatter, multiplying.
    fn kiln_scatter_prod(a: kiln_array, indices: kiln_vector_array, updates: kiln_array, axes: *const c_int, axes_num: usize) -> kiln_array =
        ops::scatter_prod(arr!(a), &vecs!(indices), arr!(updates), &ints!(axes, axes_num));
    /// As kiln_scatter, keeping the maximum.
    fn kiln_scatter_max(a: kiln_array, indices: kiln_vector_array, updates: kiln_array, axes: *const c_int, axes_num: usize) -> kiln_array =
        ops::scatter_max(arr!(a), &vecs!(indices), arr!(updates), &ints!(axes, axes_num));
    /// As kiln_scatter, keeping the minimum.
    fn kiln_scatter_min(a: kiln_array, indices: kiln_vector_array, updates: kiln_array, axes: *const c_int, axes_num: usize) -> kiln_array =
        ops::scatter_min(arr!(a), &vecs!(indices), arr!(updates), &ints!(axes, axes_num));
    /// Diagonal `offset` of the planes spanned by axis1 and axis2.
    fn kiln_diagonal(a: kiln_array, offset: c_int, axis1: c_int, axis2: c_int) -> kiln_array = ops::diagonal(arr!(a), offset as i64, axis1 as i64, axis2 as i64);
    /// The diagonal `k` of a matrix, or a matrix with a vector on diagonal `k`.
    fn kiln_diag(a: kiln_array, k: c_int) -> kiln_array = ops::diag(arr!(a), k as i64);
    /// The flattened a rolled by `shift` (shape kept).
    fn kiln_roll(a: kiln_array, shift: c_int) -> kiln_array = ops::roll(arr!(a), shift as i64, None);
    /// a rolled by `shift` along `axis`.
    fn kiln_roll_axis(a: kiln_array, shift: c_int, axis: c_int) -> kiln_array = ops::roll(arr!(a), shift as i64, Some(axis as i64));

    /// An array of `shape` and `dtype` filled with 0.
    fn kiln_zeros(shape: *const c_int, shape_num: usize, dtype: kiln_dtype) -> kiln_array = ops::zeros(&shp!(shape, shape_num), dt!(dtype));
    /// An array of `shape` and `dtype` filled with 1.
    fn kiln_ones(shape: *const c_int, shape_num: usize, dtype: kiln_dtype) -> kiln_array = ops::ones(&shp!(shape, shape_num), dt!(dtype));
    /// An array of `shape` and `dtype` filled with `vals` (broadcast).
    fn kiln_full(shape: *const c_int, shape_num: usize, vals: kiln_array, dtype: kiln_dtype) -> kiln_array = ops::full(&shp!(shape, shape_num), arr!(vals), Some(dt!(dtype)));
    /// Zeros shaped and typed as a.
    fn kiln_zeros_like(a: kiln_array) -> kiln_array = ops::zeros_like(arr!(a));
    /// Ones shaped and typed as a.
    fn kiln_ones_like(a: kiln_array) -> kiln_array = ops::ones_like(arr!(a));
    /// start, start + step, ... below stop.
    fn kiln_arange(start: f64, stop: f64, step: f64, dtype: kiln_dtype) -> kiln_array = ops::arange(start, stop, step, dt!(dtype));
    /// `num` evenly spaced values from start to stop inclusive.
    fn kiln_linspace(start: f64, stop: f64, num: c_int, dtype: kiln_dtype) -> kiln_array = ops::linspace(start, stop, cnt!(num), dt!(dtype));
    /// An n x m matrix with ones on diagonal k.
    fn kiln_eye(n: c_int, m: c_int, k: c_int, dtype: kiln_dtype) -> kiln_array = ops::eye(cnt!(n), Some(cnt!(m)), k as i64, dt!(dtype));
    /// The n x n identity matrix.
    fn kiln_identity(n: c_int, dtype: kiln_dtype) -> kiln_array = ops::identity(cnt!(n), dt!(dtype));
    /// Coordinate grids of the 1-d arrays (`indexing_xy`: Cartesian, else matrix indexing).
    fn kiln_meshgrid(arrays: kiln_vector_array, indexing_xy: bool) -> kiln_vector_array = ops::meshgrid(&vecs!(arrays), indexing_xy);

    /// `num` new keys from `key`, as a (num, 2) array.
    fn kiln_random_split(key: kiln_array, num: c_int) -> kiln_array = random::split(&arr!(key), cnt!(num));
    /// Uniform samples in [low, high) of `shape` and `dtype` (key may be empty: the global state).
    fn kiln_random_uniform(low: f64, high: f64, shape: *const c_int, shape_num: usize, dtype: kiln_dtype, key: kiln_array) -> kiln_array =
        random::uniform(low, high, &shp!(shape, shape_num), dt!(dtype), opt!(key).as_ref());
    /// Normal samples of mean `loc` and standard deviation `scale` (key may be empty).
    fn kiln_random_normal(shape: *const c_int, shape_num: usize, dtype: kiln_dtype, loc: f32, scale: f32, key: kiln_array) -> kiln_array =
        random::normal(&shp!(shape, shape_num), dt!(dtype), loc as f64, scale as f64, opt!(key).as_ref());
    /// Normal samples truncated to [lower, upper] (key may be empty).
    fn kiln_random_truncated_normal(lower: f64, upper: f64, shape: *const c_int, shape_num: usize, dtype: kiln_dtype, key: kiln_array) -> kiln_array =
        random::truncated_normal(lower, upper, &shp!(shape, shape_num), dt!(dtype), opt!(key).as_ref());
    /// Booleans that are true with probability p, of `shape` (key may be empty).
    fn kiln_random_bernoulli(p: kiln_array, shape: *const c_int, shape_num: usize, key: kiln_array) -> kiln_array =
        random::bernoulli(arr!(p), Some(&shp!(shape, shape_num)), opt!(key).as_ref());
    /// Integers in [low, high) of `shape` and `dtype` (key may be empty).
    fn kiln_random_randint(low: c_int, high: c_int, shape: *const c_int, shape_num: usize, dtype: kiln_dtype, key: kiln_array) -> kiln_array =
        random::randint(low as i64, high as i64, &shp!(shape, shape_num), dt!(dtype), opt!(key).as_ref());
    /// Gumbel samples of `shape` and `dtype` (key may be empty).
    fn kiln_random_gumbel(shape: *const c_int, shape_num: usize, dtype: kiln_dtype, key: kiln_array) -> kiln_array =
        random::gumbel(&shp!(shape, shape_num), dt!(dtype), opt!(key).as_ref());
    /// Samples of the categories along `axis` of `logits` (key may be empty).
    fn kiln_random_categorical(logits: kiln_array, axis: c_int, key: kiln_array) -> kiln_array =
        random::categorical(arr!(logits), axis as i64, None, opt!(key).as_ref());
    /// A random permutation of 0..n (key may be empty).
    fn kiln_random_permutation_arange(n: c_int, key: kiln_array) -> kiln_array = random::permutation(cnt!(n), opt!(key).as_ref());
    /// Random bits of `shape`, `width` bytes per element (1, 2 or 4; key may be empty).
    fn kiln_random_bits(shape: *const c_int, shape_num: usize, width: c_int, key: kiln_array) -> kiln_array =
        random::bits(&shp!(shape, shape_num), cnt!(width), opt!(key).as_ref());
}

/// A PRNG key (a uint32 array of shape (2,)) from `seed`.
#[no_mangle]
pub unsafe extern "C" fn kiln_random_key(res: *mut kiln_array, seed: u64) -> c_int {
    status("kiln_random_key", || unsafe { crate::array::set_array(res, random::key(seed)) })
}

/// Seeds the global random state.
#[no_mangle]
pub extern "C" fn kiln_random_seed(seed: u64) -> c_int {
    status("kiln_random_seed", || {
        random::seed(seed);
        Ok(())
    })
}
