//! Functions with user-supplied derivatives ([`CustomFunction`]) and [`checkpoint`], which is
//! one: its derivative recomputes the forward pass instead of keeping it.
//!
//! A call of a custom function runs the function, then wraps each output in an
//! [`Op::Custom`](crate::primitive::Op::Custom) node whose inputs are all the call's outputs and
//! arguments. The node evaluates as a view of its output, so the forward pass costs nothing
//! extra; transforms that meet it use the call's rules instead of walking into the function.
//! A rule left unset falls back to the function's own graph.

use super::Function;
use crate::array::Array;
use crate::error::Result;
use crate::primitive::Op;
use std::sync::Arc;

/// A user vjp: `(arguments, output cotangents, outputs)` to one cotangent per argument.
pub type VjpRule = Arc<dyn Fn(&[Array], &[Array], &[Array]) -> Result<Vec<Array>> + Send + Sync>;
/// A user jvp: `(arguments, argument tangents)` to one tangent per output.
pub type JvpRule = Arc<dyn Fn(&[Array], &[Array]) -> Result<Vec<Array>> + Send + Sync>;
/// A user batching rule: `(batched arguments, their batch axes)` to the batched outputs and
/// their batch axes (`None` for an unbatched argument or output).
pub type VmapRule =
    Arc<dyn Fn(&[Array], &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> + Send + Sync>;

/// The rules of one custom function.
pub(crate) struct Rules {
    pub name: String,
    pub vjp: Option<VjpRule>,
    pub jvp: Option<JvpRule>,
    pub vmap: Option<VmapRule>,
}

/// One call of a custom function: its rules and how many outputs it produced. Compares and
/// hashes by identity, so the outputs of one call can be found together.
#[derive(Clone)]
pub struct CustomCall(Arc<CallSite>);

struct CallSite {
    rules: Arc<Rules>,
    outputs: usize,
}

impl CustomCall {
    pub(crate) fn new(rules: Arc<Rules>, outputs: usize) -> CustomCall {
        CustomCall(Arc::new(CallSite { rules, outputs }))
    }
    /// The call's identity.
    pub(crate) fn id(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }
    /// How many outputs the call produced (they lead every output node's input list).
    pub(crate) fn outputs(&self) -> usize {
        self.0.outputs
    }
    /// The function's rules.
    pub(crate) fn rules(&self) -> &Arc<Rules> {
        &self.0.rules
    }
}

impl PartialEq for CustomCall {
    fn eq(&self, other: &CustomCall) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for CustomCall {}

impl std::hash::Hash for CustomCall {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.id().hash(state)
    }
}

impl std::fmt::Debug for CustomCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CustomCall({})", self.0.rules.name)
    }
}

/// Wraps each of `outputs` (computed from `args`) in a custom node of a fresh call of `rules`.
pub(crate) fn wrap_outputs(rules: &Arc<Rules>, outputs: &[Array], args: &[Array]) -> Result<Vec<Array>> {
    let call = CustomCall::new(rules.clone(), outputs.len());
    let inputs: Vec<Array> = outputs.iter().chain(args).cloned().collect();
    (0..outputs.len())
        .map(|index| Array::from_op(Op::Custom { index, call: call.clone() }, inputs.clone()))
        .collect()
}

/// A function with user-supplied derivative and batching rules, as mlx's `custom_function`:
///
/// ```
/// use kiln::{transforms::{grad, CustomFunction}, ops, Array};
/// // exp whose derivative is (deliberately) reported as 2.
/// let f = CustomFunction::new("my_exp", |x: &[Array]| Ok(vec![ops::exp(&x[0])?]))
///     .vjp(|_args, cts, _outs| Ok(vec![ops::multiply(&cts[0], 2.0)?]))
///     .into_fn();
/// let g = grad(move |x: &[Array]| Ok(vec![ops::sum(&f(x)?[0], None, false)?]), &[0]);
/// let d = g(&[Array::from_vec(vec![0.5f32, 1.0])]).unwrap();
/// assert_eq!(d[0].to_vec::<f32>().unwrap(), vec![2.0, 2.0]);
/// ```
pub struct CustomFunction {
    fun: Arc<dyn Function + Send + Sync>,
    rules: Rules,
}

impl CustomFunction {
    /// Wraps `fun`; `name` appears in graphs and errors.
    pub fn new(name: &str, fun: impl Function + Send + Sync + 'static) -> CustomFunction {
        CustomFunction {
            fun: Arc::new(fun),
            rules: Rules { name: name.to_string(), vjp: None, jvp: None, vmap: None },
        }
    }

    /// Sets the vjp: `(arguments, output cotangents, outputs)` to one cotangent per argument.
    pub fn vjp(
        mut self,
        rule: impl Fn(&[Array], &[Array], &[Array]) -> Result<Vec<Array>> + Send + Sync + 'static,
    ) -> CustomFunction {
        self.rules.vjp = Some(Arc::new(rule));
        self
    }

    /// Sets the jvp: `(arguments, argument tangents)` to one tangent per output.
    pub fn jvp(mut self, rule: impl Fn(&[Array], &[Array]) -> Result<Vec<Array>> + Send + Sync + 'static) -> CustomFunction {
        self.rules.jvp = Some(Arc::new(rule));
        self
    }

    /// Sets the batching rule: `(batched arguments, batch axes)` to `(outputs, batch axes)`.
    pub fn vmap(
        mut self,
        rule: impl Fn(&[Array], &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> + Send + Sync + 'static,
    ) -> CustomFunction {
        self.rules.vmap = Some(Arc::new(rule));
        self
    }

    /// The finished function, usable wherever a [`Function`] is (transforms, compile).
    pub fn into_fn(self) -> impl Function + Clone + Send + Sync + 'static {
        let fun = self.fun;
        let rules = Arc::new(self.rules);
        move |args: &[Array]| {
            let outputs = fun(args)?;
            wrap_outputs(&rules, &outputs, args)
        }
    }
}

/// `f` whose reverse-mode derivative recomputes `f`'s forward pass from its arguments instead of
/// keeping its intermediates alive: trades compute for memory (apply it to the blocks of a deep
/// model; the block boundaries are all that stays alive between forward and backward).
pub fn checkpoint(f: impl Function + Send + Sync + 'static) -> impl Function + Clone + Send + Sync + 'static {
    let f = Arc::new(f);
    let forward = f.clone();
    CustomFunction::new("checkpoint", move |args: &[Array]| forward(args))
        .vjp(move |args, cotangents, _outputs| {
            let (_, grads) = super::vjp(|a: &[Array]| f(a), args, cotangents)?;
            Ok(grads)
        })
        .into_fn()
}
