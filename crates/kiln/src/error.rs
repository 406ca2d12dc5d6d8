//! The one error type of kiln: every failure names the op and says what was wrong with which
//! shapes or dtypes, and where there is one, the fix.

use std::fmt;

/// What kind of mistake an [`Error`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Shapes that do not fit together (broadcasting, reshape sizes, matmul dimensions).
    Shape,
    /// A dtype the op does not accept.
    Dtype,
    /// An axis out of range or repeated.
    Axis,
    /// Any other bad argument value (negative counts, bad index, wrong number of inputs).
    Value,
    /// An operation not available for this device or configuration.
    Unsupported,
    /// Reading data of an array that has none (for example a placeholder inside a trace).
    NoData,
    /// A device failed or cannot be used: no driver or library, out of device memory, a kernel
    /// that did not build or launch.
    Device,
}

/// A kiln error: the op it came from, its kind, and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// The op (mlx.core name) that failed.
    pub op: String,
    /// What kind of mistake it was.
    pub kind: ErrorKind,
    /// The human-readable explanation, naming shapes and dtypes.
    pub message: String,
}

/// The result type of the fallible kiln API.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of `kind` from `op`.
    pub fn new(op: &str, kind: ErrorKind, message: impl Into<String>) -> Error {
        Error { op: op.to_string(), kind, message: message.into() }
    }
    /// A shape mismatch in `op`.
    pub fn shape(op: &str, message: impl Into<String>) -> Error {
        Error::new(op, ErrorKind::Shape, message)
    }
    /// A dtype `op` does not accept.
    pub fn dtype(op: &str, message: impl Into<String>) -> Error {
        Error::new(op, ErrorKind::Dtype, message)
    }
    /// A bad axis in `op`.
    pub fn axis(op: &str, message: impl Into<String>) -> Error {
        Error::new(op, ErrorKind::Axis, message)
    }
    /// A bad argument value in `op`.
    pub fn value(op: &str, message: impl Into<String>) -> Error {
        Error::new(op, ErrorKind::Value, message)
    }
    /// Something `op` cannot do here.
    pub fn unsupported(op: &str, message: impl Into<String>) -> Error {
        Error::new(op, ErrorKind::Unsupported, message)
    }
    /// The same error reported under `op`: a composite op (std, clip, softmax, ...) built from
    /// other ops names itself, the op the user called, rather than the primitive that failed.
    pub fn in_op(self, op: &str) -> Error {
        Error { op: op.to_string(), ..self }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.op, self.message)
    }
}

impl std::error::Error for Error {}
