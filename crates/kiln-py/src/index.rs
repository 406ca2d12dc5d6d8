//! Indexing with numpy's rules: `a[...]` with ints, slices, `...`, `None` and integer arrays
//! (lists and numpy arrays count as arrays); `a[...] = v`, which replaces the array object's
//! value as mlx does; and `a.at[...].add(v)` (and subtract, multiply, divide, maximum,
//! minimum), where repeated indices accumulate.
//!
//! Basic indices become one strided view (`slice`, then `squeeze` for the int axes). Any array
//! index makes the ints advanced too (as in numpy): the indices broadcast together, one `gather`
//! picks the slices, and the broadcast axes go first unless the advanced indices are adjacent, in
//! which case they take the place of the first one. Boolean masks are not supported (they would
//! make the shape depend on the data); use `where`.

use crate::array::PyArray;
use crate::convert::{operand, Operand};
use crate::errors::OrRaise;
use kiln::ops::{self, AxisBound, SliceSpec};
use kiln::{Array, Dtype};
use pyo3::exceptions::{PyAttributeError, PyTypeError, PyValueError};
use crate::errors::index_error;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyEllipsis, PyInt, PyList, PySlice, PyTuple};

/// One entry of an index key.
enum Entry {
    Int(i64),
    Slice(SliceSpec),
    Ellipsis,
    NewAxis,
    Array(Array),
}

/// An entry per axis once `...` and `None` are resolved.
enum AxisIndex {
    Int(i64),
    Slice(SliceSpec),
    Array(Array),
}

fn parse_entry(obj: &Bound<'_, PyAny>) -> PyResult<Entry> {
    if obj.is_none() {
        return Ok(Entry::NewAxis);
    }
    if obj.is_instance_of::<PyEllipsis>() {
        return Ok(Entry::Ellipsis);
    }
    if let Ok(s) = obj.cast::<PySlice>() {
        let part = |name: &str| -> PyResult<Option<i64>> {
            let v = s.getattr(name)?;
            if v.is_none() {
                Ok(None)
            } else {
                v.extract()
                    .map(Some)
                    .map_err(|_| PyTypeError::new_err("slice bounds must be integers or None"))
            }
        };
        let step = part("step")?.unwrap_or(1);
        if step == 0 {
            return Err(PyValueError::new_err("slice step cannot be zero"));
        }
        return Ok(Entry::Slice(SliceSpec {
            start: part("start")?,
            stop: part("stop")?,
            step,
        }));
    }
    if obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(
            "boolean indices are not supported; use kiln.core.where to select by a mask",
        ));
    }
    if obj.is_instance_of::<PyInt>() {
        return Ok(Entry::Int(obj.extract()?));
    }
    if !is_array_like(obj)? {
        return Err(PyTypeError::new_err(format!(
            "cannot index with a {}; use ints, slices, ..., None or integer arrays",
            obj.get_type().name()?
        )));
    }
    let a = operand(obj)?;
    match a.dtype() {
        Dtype::Bool => Err(PyTypeError::new_err(
            "boolean mask indices are not supported for reading (the result's shape would depend on the data); use kiln.core.where (assigning through a mask, a[mask] = v, is supported)",
        )),
        d if d.is_float() => Err(PyTypeError::new_err(format!("array indices must be integers, got {d}"))),
        _ => Ok(Entry::Array(a)),
    }
}

/// Whether an index entry is an array or something that converts to one (a list, a numpy array).
fn is_array_like(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(obj.cast::<PyArray>().is_ok() || obj.is_instance_of::<PyList>() || obj.hasattr("__array_interface__")?)
}

/// The key as a boolean mask when it is one (a Python bool, a kiln or numpy bool array, or a list
/// of bools).
fn boolean_mask(key: &Bound<'_, PyAny>) -> PyResult<Option<Array>> {
    if key.is_instance_of::<PyBool>() {
        // `a[True] = v` writes everything, `a[False] = v` nothing: a 0-d mask.
        return Ok(Some(Array::scalar(key.extract::<bool>()?)));
    }
    if !is_array_like(key)? {
        return Ok(None);
    }
    let a = operand(key)?;
    Ok((a.dtype() == Dtype::Bool).then_some(a))
}

fn parse_key(key: &Bound<'_, PyAny>) -> PyResult<Vec<Entry>> {
    match key.cast::<PyTuple>() {
        Ok(t) => t.iter().map(|e| parse_entry(&e)).collect(),
        Err(_) => Ok(vec![parse_entry(key)?]),
    }
}

/// Resolves `...` and `None` against `ndim` axes: the entry for each axis of the array after
/// inserting the new axes, and where those new axes go.
fn resolve(entries: Vec<Entry>, ndim: usize) -> PyResult<(Vec<AxisIndex>, Vec<i64>)> {
    let used = entries
        .iter()
        .filter(|e| !matches!(e, Entry::Ellipsis | Entry::NewAxis))
        .count();
    if entries
        .iter()
        .filter(|e| matches!(e, Entry::Ellipsis))
        .count()
        > 1
    {
        return Err(index_error("an index can only have a single ellipsis ('...')".into()));
    }
    if used > ndim {
        return Err(index_error(format!(
            "too many indices for array: array is {ndim}-dimensional, but {used} were indexed"
        )));
    }
    let fill = ndim - used;
    let mut axes = Vec::new();
    let mut new_axes = Vec::new();
    let mut saw_ellipsis = false;
    for e in entries {
        match e {
            Entry::Int(i) => axes.push(AxisIndex::Int(i)),
            Entry::Slice(s) => axes.push(AxisIndex::Slice(s)),
            Entry::Array(a) => axes.push(AxisIndex::Array(a)),
            Entry::NewAxis => {
                new_axes.push(axes.len() as i64);
                axes.push(AxisIndex::Slice(SliceSpec::ALL));
            }
            Entry::Ellipsis => {
                saw_ellipsis = true;
                axes.extend((0..fill).map(|_| AxisIndex::Slice(SliceSpec::ALL)));
            }
        }
    }
    if !saw_ellipsis {
        axes.extend((0..fill).map(|_| AxisIndex::Slice(SliceSpec::ALL)));
    }
    Ok((axes, new_axes))
}

/// `i` made non-negative and checked against an axis of size `dim`.
fn check_int(i: i64, axis: usize, dim: usize) -> PyResult<i64> {
    let j = if i < 0 { i + dim as i64 } else { i };
    if j < 0 || j >= dim as i64 {
        return Err(index_error(format!("index {i} is out of bounds for axis {axis} with size {dim}")));
    }
    Ok(j)
}

/// The basic part of an index: one bound per axis as written (ints checked against the axis,
/// kept as written so a shapeless compiled function resolves them again at new shapes) and the
/// int axes, or `None` when the key has array indices.
fn basic_bounds(axes: &[AxisIndex], shape: &[usize]) -> PyResult<Option<(Vec<AxisBound>, Vec<i64>)>> {
    let mut bounds = Vec::new();
    let mut ints = Vec::new();
    for (ax, e) in axes.iter().enumerate() {
        match e {
            AxisIndex::Int(i) => {
                check_int(*i, ax, shape[ax])?;
                bounds.push(AxisBound::Index(*i));
                ints.push(ax as i64);
            }
            AxisIndex::Slice(s) => bounds.push(AxisBound::Range(*s)),
            AxisIndex::Array(_) => return Ok(None),
        }
    }
    Ok(Some((bounds, ints)))
}

/// The advanced part of an index: the slices of the other axes, the advanced axes and their
/// index arrays (ints become 0-d arrays, as in numpy).
struct Advanced {
    specs: Vec<SliceSpec>,
    axes: Vec<i64>,
    indices: Vec<Array>,
}

fn advanced(axes: Vec<AxisIndex>, shape: &[usize]) -> PyResult<Advanced> {
    let mut adv = Advanced {
        specs: Vec::new(),
        axes: Vec::new(),
        indices: Vec::new(),
    };
    for (ax, e) in axes.into_iter().enumerate() {
        match e {
            AxisIndex::Slice(s) => adv.specs.push(s),
            AxisIndex::Int(i) => {
                adv.specs.push(SliceSpec::ALL);
                adv.axes.push(ax as i64);
                adv.indices
                    .push(Array::scalar(check_int(i, ax, shape[ax])?));
            }
            AxisIndex::Array(a) => {
                adv.specs.push(SliceSpec::ALL);
                adv.axes.push(ax as i64);
                adv.indices.push(a);
            }
        }
    }
    Ok(adv)
}

impl Advanced {
    /// Whether the advanced axes are adjacent, so their broadcast axes replace them in place.
    fn in_place_at(&self) -> Option<usize> {
        let first = self.axes[0];
        let adjacent = self.axes.windows(2).all(|w| w[1] == w[0] + 1);
        (adjacent && first > 0).then_some(first as usize)
    }

    /// Picks the indexed elements of `y` (already sliced): the broadcast index axes, then the
    /// remaining axes, moved in place when the advanced axes are adjacent.
    fn gather(&self, y: &Array) -> kiln::Result<Array> {
        let sizes: Vec<usize> = y
            .shape()
            .iter()
            .enumerate()
            .map(|(ax, &d)| {
                if self.axes.contains(&(ax as i64)) {
                    1
                } else {
                    d
                }
            })
            .collect();
        let g = ops::gather(y, &self.indices, &self.axes, &sizes)?;
        let nb = g.ndim() - y.ndim();
        let squeezed: Vec<i64> = self.axes.iter().map(|&a| nb as i64 + a).collect();
        let g = ops::squeeze(g, Some(&squeezed))?;
        match self.in_place_at() {
            None => Ok(g),
            Some(p) => ops::transpose(&g, Some(&self.to_place(nb, p, g.ndim()))),
        }
    }

    /// The permutation moving `nb` leading axes to position `p` of `n`.
    fn to_place(&self, nb: usize, p: usize, n: usize) -> Vec<i64> {
        let mut perm: Vec<i64> = (nb..nb + p).map(|a| a as i64).collect();
        perm.extend((0..nb).map(|a| a as i64));
        perm.extend((nb + p..n).map(|a| a as i64));
        perm
    }

    /// `updates` shaped like this index's result, rearranged into the layout `scatter` takes:
    /// the broadcast index axes, then one size-1 axis per advanced axis and the other axes whole.
    fn scatter_layout(&self, y: &Array, updates: &Array) -> kiln::Result<Array> {
        let result = self.gather(y)?;
        let u = ops::broadcast_to(ops::astype(updates, y.dtype())?, result.shape())?;
        let nb = result.ndim() + self.axes.len() - y.ndim();
        let u = match self.in_place_at() {
            None => u,
            Some(p) => {
                let perm = self.to_place(nb, p, u.ndim());
                let mut inverse = vec![0i64; perm.len()];
                for (i, &a) in perm.iter().enumerate() {
                    inverse[a as usize] = i as i64;
                }
                ops::transpose(&u, Some(&inverse))?
            }
        };
        let expanded: Vec<i64> = self.axes.iter().map(|&a| nb as i64 + a).collect();
        ops::expand_dims(u, &expanded)
    }
}

/// `x[key]`.
pub fn get(x: &Array, key: &Bound<'_, PyAny>) -> PyResult<Array> {
    let (axes, new_axes) = resolve(parse_key(key)?, x.ndim())?;
    let x = with_new_axes(x, &new_axes)?;
    if let Some((bounds, ints)) = basic_bounds(&axes, x.shape())? {
        let y = ops::slice_written(&x, &bounds).or_raise()?;
        return if ints.is_empty() { Ok(y) } else { ops::squeeze(y, Some(&ints)).or_raise() };
    }
    let adv = advanced(axes, x.shape())?;
    let y = ops::slice(&x, &adv.specs).or_raise()?;
    adv.gather(&y).or_raise()
}

/// `x` with size-1 axes inserted at `new_axes` (a key's `None`s), as indexing sees it.
fn with_new_axes(x: &Array, new_axes: &[i64]) -> PyResult<Array> {
    if new_axes.is_empty() {
        Ok(x.clone())
    } else {
        ops::expand_dims(x, new_axes).or_raise()
    }
}

/// `v` without the leading size-1 axes it has beyond `ndim` (as mlx accepts `a[1:3] = [[1, 2]]`:
/// the extra axes hold one value each).
fn without_leading_ones(v: &Array, ndim: usize) -> PyResult<Array> {
    let extra = v.ndim().saturating_sub(ndim);
    if extra == 0 || v.shape()[..extra].iter().any(|&d| d != 1) {
        return Ok(v.clone());
    }
    let leading: Vec<i64> = (0..extra as i64).collect();
    ops::squeeze(v, Some(&leading)).or_raise()
}

/// How an indexed update combines with the current values.
#[derive(Clone, Copy)]
pub enum Update {
    Set,
    Add,
    Multiply,
    Maximum,
    Minimum,
}

/// A copy of `x` with the elements `x[key]` combined with `v` by `how`. Repeated array indices
/// accumulate for every `how` but `Set`.
pub fn update(x: &Array, key: &Bound<'_, PyAny>, v: &Array, how: Update) -> PyResult<Array> {
    // The update runs on `x` with the key's new axes inserted, as `get` reads it, so `v` lines
    // up with the full result (new axes included, wherever numpy's rules put them); the new
    // axes are dropped again at the end.
    let target = get(x, key)?;
    let v = &without_leading_ones(v, target.ndim())?;
    let (axes, new_axes) = resolve(parse_key(key)?, x.ndim())?;
    let updated = update_axes(&with_new_axes(x, &new_axes)?, axes, &target, v, how)?;
    if new_axes.is_empty() {
        Ok(updated)
    } else {
        ops::squeeze(updated, Some(&new_axes)).or_raise()
    }
}

/// [`update`] once the key is resolved to one entry per axis of `x`; `target` is `x[key]`.
fn update_axes(
    x: &Array,
    axes: Vec<AxisIndex>,
    target: &Array,
    v: &Array,
    how: Update,
) -> PyResult<Array> {
    let combine = |old: &Array, v: &Array| -> kiln::Result<Array> {
        match how {
            Update::Set => Ok(v.clone()),
            Update::Add => ops::add(old, v),
            Update::Multiply => ops::multiply(old, v),
            Update::Maximum => ops::maximum(old, v),
            Update::Minimum => ops::minimum(old, v),
        }
    };
    if let Some((bounds, ints)) = basic_bounds(&axes, x.shape())? {
        // `new` has the indexed shape; it gets the region's axes back (leading size-1 axes it
        // broadcasts over, and the int axes) with ops that follow shapeless shapes, and the
        // slice update broadcasts it to the region.
        let new = combine(target, v).and_then(|n| ops::astype(n, x.dtype())).or_raise()?;
        if new.ndim() > target.ndim() {
            return Err(PyValueError::new_err(format!(
                "slice_update: cannot broadcast a value of shape {} to the indexed shape {}",
                kiln::shape::fmt_shape(new.shape()),
                kiln::shape::fmt_shape(target.shape())
            )));
        }
        let lead: Vec<i64> = (0..(target.ndim() - new.ndim()) as i64).collect();
        let new = ops::expand_dims(ops::expand_dims(new, &lead).or_raise()?, &ints).or_raise()?;
        return ops::slice_update_written(x, new, &bounds).or_raise();
    }
    let adv = advanced(axes, x.shape())?;
    let run = || -> kiln::Result<Array> {
        let region = ops::slice(x, &adv.specs)?;
        let updates = adv.scatter_layout(&region, v)?;
        let scattered = match how {
            Update::Set => ops::scatter(&region, &adv.indices, updates, &adv.axes)?,
            Update::Add => ops::scatter_add(&region, &adv.indices, updates, &adv.axes)?,
            Update::Multiply => ops::scatter_prod(&region, &adv.indices, updates, &adv.axes)?,
            Update::Maximum => ops::scatter_max(&region, &adv.indices, updates, &adv.axes)?,
            Update::Minimum => ops::scatter_min(&region, &adv.indices, updates, &adv.axes)?,
        };
        ops::slice_update(x, scattered, &adv.specs)
    };
    run().or_raise()
}

#[pymethods]
impl PyArray {
    fn __getitem__(&self, key: &Bound<'_, PyAny>) -> PyResult<PyArray> {
        get(&self.array, key).map(PyArray::from)
    }

    /// `a[key] = v`: the array object now holds the updated value (as in mlx).
    /// The key and the value are read before `self` is borrowed for writing, so either may be
    /// the array itself (`a[a > 0] = a`).
    fn __setitem__(slf: &Bound<'_, Self>, key: &Bound<'_, PyAny>, v: &Bound<'_, PyAny>) -> PyResult<()> {
        let v = operand(v)?;
        let current = slf.try_borrow()?.array.clone();
        let updated = match boolean_mask(key)? {
            // `a[mask] = v`: mlx's masked scatter (the result keeps a's shape).
            Some(mask) => ops::masked_scatter(&current, &mask, &v).or_raise()?,
            None => update(&current, key, &v, Update::Set)?,
        };
        slf.try_borrow_mut()?.array = updated;
        Ok(())
    }

    /// Functional indexed updates: `a.at[idx].add(v)` returns a new array.
    #[getter]
    fn at(&self) -> ArrayAt {
        ArrayAt {
            array: self.array.clone(),
        }
    }
}

/// The object `a.at` returns; index it to choose the elements to update.
#[pyclass(name = "ArrayAt", module = "kiln.core", frozen)]
pub struct ArrayAt {
    array: Array,
}

#[pymethods]
impl ArrayAt {
    fn __getitem__(&self, key: Bound<'_, PyAny>) -> ArrayAtIndex {
        ArrayAtIndex {
            array: self.array.clone(),
            key: key.unbind(),
        }
    }

    /// An update method asked of `a.at` itself is a ValueError naming the missing index (as
    /// in mlx); other names are not attributes.
    fn __getattr__(&self, name: &str) -> PyResult<()> {
        Err(if ["add", "subtract", "multiply", "divide", "maximum", "minimum"].contains(&name) {
            PyValueError::new_err(format!("a.at.{name}: choose the elements first, as in a.at[index].{name}(v)"))
        } else {
            PyAttributeError::new_err(format!("'ArrayAt' object has no attribute '{name}'"))
        })
    }
}

/// `a.at[idx]`: the update methods return a new array with `a[idx]` combined with `v`.
#[pyclass(name = "ArrayAtIndex", module = "kiln.core", frozen)]
pub struct ArrayAtIndex {
    array: Array,
    key: Py<PyAny>,
}

impl ArrayAtIndex {
    fn apply(&self, py: Python<'_>, v: &Array, how: Update) -> PyResult<PyArray> {
        update(&self.array, self.key.bind(py), v, how).map(PyArray::from)
    }
}

#[pymethods]
impl ArrayAtIndex {
    /// `a[idx] + v`, repeated indices accumulating.
    fn add(&self, py: Python<'_>, v: Operand) -> PyResult<PyArray> {
        self.apply(py, &v.0, Update::Add)
    }

    /// `a[idx] - v`, repeated indices accumulating.
    fn subtract(&self, py: Python<'_>, v: Operand) -> PyResult<PyArray> {
        let neg = ops::negative(&v.0).or_raise()?;
        self.apply(py, &neg, Update::Add)
    }

    /// `a[idx] * v`, repeated indices accumulating.
    fn multiply(&self, py: Python<'_>, v: Operand) -> PyResult<PyArray> {
        self.apply(py, &v.0, Update::Multiply)
    }

    /// `a[idx] / v`, repeated indices accumulating.
    fn divide(&self, py: Python<'_>, v: Operand) -> PyResult<PyArray> {
        let inv = ops::reciprocal(&v.0).or_raise()?;
        self.apply(py, &inv, Update::Multiply)
    }

    /// `maximum(a[idx], v)`.
    fn maximum(&self, py: Python<'_>, v: Operand) -> PyResult<PyArray> {
        self.apply(py, &v.0, Update::Maximum)
    }

    /// `minimum(a[idx], v)`.
    fn minimum(&self, py: Python<'_>, v: Operand) -> PyResult<PyArray> {
        self.apply(py, &v.0, Update::Minimum)
    }
}
