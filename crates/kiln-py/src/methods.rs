//! The op methods of `array`, as in mlx: `a.sum(axis=1)` is `kiln.core.sum(a, axis=1)`. Each
//! method forwards to the module-level function, so both share one implementation.

use crate::array::PyArray;
use crate::device::StreamOrDevice;
use crate::ops::{math, reduce, shape, Axes, Sizes};
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyTuple};

/// Sizes or axes given either as one sequence or spread out: `a.reshape(2, 3)` and
/// `a.reshape((2, 3))` mean the same.
fn spread(args: &Bound<'_, PyTuple>) -> PyResult<Vec<i64>> {
    if args.len() == 1 && !args.get_item(0)?.is_instance_of::<PyInt>() {
        return args.get_item(0)?.extract();
    }
    args.extract()
}

macro_rules! unary_methods {
    ($($name:ident),* $(,)?) => {
        #[pymethods]
        impl PyArray {
            $(
                #[pyo3(signature = (*, stream = None))]
                fn $name(&self, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
                    math::$name(self.operand(), stream)
                }
            )*
        }
    };
}

unary_methods!(abs, exp, log, log1p, log2, log10, sin, cos, sqrt, rsqrt, square, reciprocal, conjugate);

#[pymethods]
impl PyArray {
    /// The complex conjugate (`conjugate`'s short name, as mlx's and numpy's `conj`).
    #[pyo3(signature = (*, stream = None))]
    fn conj(&self, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
        math::conjugate(self.operand(), stream)
    }

    /// The bytes read as `dtype` (see `kiln.core.view`).
    #[pyo3(signature = (dtype, *, stream = None))]
    fn view(&self, dtype: crate::dtype::PyDtype, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
        math::view(self.operand(), dtype, stream)
    }

    /// The real part (the array itself when it is not complex).
    #[getter]
    fn real(&self) -> PyResult<PyArray> {
        math::real(self.operand(), None)
    }

    /// The imaginary part (zeros when the array is not complex).
    #[getter]
    fn imag(&self) -> PyResult<PyArray> {
        math::imag(self.operand(), None)
    }
}

macro_rules! reduction_methods {
    ($($name:ident),* $(,)?) => {
        #[pymethods]
        impl PyArray {
            $(
                #[pyo3(signature = (axis = None, keepdims = false, *, stream = None))]
                fn $name(&self, axis: Option<Axes>, keepdims: bool, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
                    reduce::$name(self.operand(), axis, keepdims, stream)
                }
            )*
        }
    };
}

reduction_methods!(sum, prod, max, min, all, any, mean, logsumexp);

macro_rules! spread_methods {
    ($($name:ident => $f:ident),* $(,)?) => {
        #[pymethods]
        impl PyArray {
            $(
                #[pyo3(signature = (axis = None, keepdims = false, ddof = 0, *, stream = None))]
                fn $name(&self, axis: Option<Axes>, keepdims: bool, ddof: usize, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
                    reduce::$f(self.operand(), axis, keepdims, ddof, stream)
                }
            )*
        }
    };
}

spread_methods!(var => var, std => std_dev);

macro_rules! arg_methods {
    ($($name:ident),* $(,)?) => {
        #[pymethods]
        impl PyArray {
            $(
                #[pyo3(signature = (axis = None, keepdims = false, *, stream = None))]
                fn $name(&self, axis: Option<i64>, keepdims: bool, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
                    reduce::$name(self.operand(), axis, keepdims, stream)
                }
            )*
        }
    };
}

arg_methods!(argmax, argmin);

macro_rules! scan_methods {
    ($($name:ident),* $(,)?) => {
        #[pymethods]
        impl PyArray {
            $(
                #[pyo3(signature = (axis = None, *, reverse = false, inclusive = true, stream = None))]
                fn $name(&self, axis: Option<i64>, reverse: bool, inclusive: bool, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
                    reduce::$name(self.operand(), axis, reverse, inclusive, stream)
                }
            )*
        }
    };
}

scan_methods!(cumsum, cumprod, cummax, cummin, logcumsumexp);

#[pymethods]
impl PyArray {
    #[pyo3(signature = (decimals = 0, *, stream = None))]
    fn round(&self, decimals: i32, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
        math::round(self.operand(), decimals, stream)
    }

    /// `a.reshape(2, 3)` or `a.reshape((2, 3))`.
    #[pyo3(signature = (*shape, stream = None))]
    fn reshape(
        &self,
        shape: &Bound<'_, PyTuple>,
        stream: Option<StreamOrDevice>,
    ) -> PyResult<PyArray> {
        shape::reshape(self.operand(), Sizes(spread(shape)?), stream)
    }

    /// `a.transpose()`, `a.transpose(1, 0)` or `a.transpose((1, 0))`.
    #[pyo3(signature = (*axes, stream = None))]
    fn transpose(
        &self,
        axes: &Bound<'_, PyTuple>,
        stream: Option<StreamOrDevice>,
    ) -> PyResult<PyArray> {
        let axes = if axes.is_empty() {
            None
        } else {
            Some(spread(axes)?)
        };
        shape::transpose(self.operand(), axes, stream)
    }

    #[pyo3(signature = (start_axis = 0, end_axis = -1, *, stream = None))]
    fn flatten(
        &self,
        start_axis: i64,
        end_axis: i64,
        stream: Option<StreamOrDevice>,
    ) -> PyResult<PyArray> {
        shape::flatten(self.operand(), start_axis, end_axis, stream)
    }

    #[pyo3(signature = (axis = None, *, stream = None))]
    fn squeeze(&self, axis: Option<Axes>, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
        shape::squeeze(self.operand(), axis, stream)
    }

    #[pyo3(signature = (axis1, axis2, *, stream = None))]
    fn swapaxes(
        &self,
        axis1: i64,
        axis2: i64,
        stream: Option<StreamOrDevice>,
    ) -> PyResult<PyArray> {
        shape::swapaxes(self.operand(), axis1, axis2, stream)
    }

    #[pyo3(signature = (source, destination, *, stream = None))]
    fn moveaxis(
        &self,
        source: i64,
        destination: i64,
        stream: Option<StreamOrDevice>,
    ) -> PyResult<PyArray> {
        shape::moveaxis(self.operand(), source, destination, stream)
    }

    #[pyo3(signature = (indices_or_sections, axis = 0, *, stream = None))]
    fn split(
        &self,
        indices_or_sections: &Bound<'_, PyAny>,
        axis: i64,
        stream: Option<StreamOrDevice>,
    ) -> PyResult<Vec<PyArray>> {
        shape::split(self.operand(), indices_or_sections, axis, stream)
    }

    #[pyo3(signature = (offset = 0, axis1 = 0, axis2 = 1, *, stream = None))]
    fn diagonal(
        &self,
        offset: i64,
        axis1: i64,
        axis2: i64,
        stream: Option<StreamOrDevice>,
    ) -> PyResult<PyArray> {
        shape::diagonal(self.operand(), offset, axis1, axis2, stream)
    }

    #[pyo3(signature = (k = 0, *, stream = None))]
    fn diag(&self, k: i64, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
        shape::diag(self.operand(), k, stream)
    }
}
