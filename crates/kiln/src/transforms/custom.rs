//! Functions with user-supplied derivatives ([`CustomFunction`]) and [`checkpoint`], which is
//! one: its derivative recomputes the forward pass instead of keeping it.
//!
//! A call of a custom function runs the function on fresh identity views of its arguments, then
//! wraps each output in an [`Op::Custom`](crate::primitive::Op::Custom) node whose inputs are all
//! the call's outputs, its arguments, and the graph arrays the function *captured* (used without
//! receiving them as arguments: found as the nodes older than the call that its graph reaches).
//! The node evaluates as a view of its output, so the forward pass costs nothing extra;
//! transforms that meet it use the call's rules instead of walking into the function. A rule
//! left unset falls back to the function's own graph. A user rule only knows the arguments, so
//! differentiating or batching through a captured array under a user rule is a clear error;
//! `checkpoint` differentiates captured arrays too.

use super::Function;
use crate::array::Array;
use crate::error::Result;
use crate::identity::Shared;
use crate::primitive::Op;
use std::collections::HashSet;
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
    /// checkpoint's reverse rule: run this forward function again during the backward pass.
    pub recompute: Option<Arc<dyn Function + Send + Sync>>,
}

impl Rules {
    /// Whether the user supplied any rule (which sees only the explicit arguments).
    pub(crate) fn has_user_rule(&self) -> bool {
        self.vjp.is_some() || self.jvp.is_some() || self.vmap.is_some()
    }
}

/// One call of a custom function: its rules and how many outputs it produced. Compares and
/// hashes by identity, so the outputs of one call can be found together.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CustomCall(Shared<CallSite>);

struct CallSite {
    rules: Arc<Rules>,
    outputs: usize,
    arguments: usize,
}

impl CustomCall {
    fn new(rules: Arc<Rules>, outputs: usize, arguments: usize) -> CustomCall {
        CustomCall(Shared::new(CallSite { rules, outputs, arguments }))
    }
    /// How many explicit arguments the call had (they follow the outputs in the input list;
    /// captured arrays come after them).
    pub(crate) fn arguments(&self) -> usize {
        self.0.arguments
    }
    /// The call's identity.
    pub(crate) fn id(&self) -> usize {
        self.0.id()
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

impl std::fmt::Debug for CustomCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CustomCall({})", self.0.rules.name)
    }
}

/// Wraps each of `outputs` (computed from `args` and `captured`) in a custom node of a fresh
/// call of `rules`.
pub(crate) fn wrap_outputs(rules: &Arc<Rules>, outputs: &[Array], args: &[Array], captured: &[Array]) -> Result<Vec<Array>> {
    let call = CustomCall::new(rules.clone(), outputs.len(), args.len());
    let inputs: Vec<Array> = outputs.iter().chain(args).chain(captured).cloned().collect();
    (0..outputs.len())
        .map(|index| Array::from_op(Op::Custom { index, call: call.clone() }, inputs.clone()))
        .collect()
}

/// Runs `fun` on fresh views of `args` and wraps its outputs as one call of `rules`.
fn call(rules: &Arc<Rules>, fun: &dyn Function, args: &[Array]) -> Result<Vec<Array>> {
    let views = super::autodiff::tracers(args)?;
    let outputs = fun(&views)?;
    let captured = captured_arrays(&outputs, &views);
    wrap_outputs(rules, &outputs, args, &captured)
}

/// The graph arrays (pending, or placeholders) that `outputs` use without going through `views`:
/// nodes created before the views that the function's own nodes reach.
fn captured_arrays(outputs: &[Array], views: &[Array]) -> Vec<Array> {
    let first = views.iter().map(Array::serial).min().unwrap_or(u64::MAX);
    let view_ids: HashSet<usize> = views.iter().map(Array::id).collect();
    let mut seen = HashSet::new();
    let mut captured = Vec::new();
    let mut stack: Vec<Array> = outputs.to_vec();
    while let Some(a) = stack.pop() {
        if view_ids.contains(&a.id()) || !seen.insert(a.id()) {
            continue;
        }
        let graph = a.op_and_inputs();
        if a.serial() < first {
            if graph.is_some() || a.is_placeholder() {
                captured.push(a);
            }
            continue;
        }
        if let Some((_, inputs)) = graph {
            stack.extend(inputs);
        }
    }
    captured
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
            rules: Rules { name: name.to_string(), vjp: None, jvp: None, vmap: None, recompute: None },
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
        move |args: &[Array]| call(&rules, fun.as_ref(), args)
    }
}

/// The name of [`depends`]' calls, which compile's simplifier keeps (other custom calls become
/// views of their outputs there).
pub(crate) const DEPENDS: &str = "depends";

/// `inputs`, unchanged, made to depend on `dependencies`: evaluating an output evaluates the
/// dependencies first, eagerly, under vmap and in compiled replays (mlx's `depends`, which orders
/// side effects such as communication). Gradients flow to `inputs` only.
pub fn depends(inputs: &[Array], dependencies: &[Array]) -> Result<Vec<Array>> {
    let n = inputs.len();
    let identity = CustomFunction::new(DEPENDS, move |args: &[Array]| Ok(args[..n].to_vec()))
        .vjp(move |args, cotangents, _| {
            let none = args[n..].iter().map(crate::ops::zeros_like);
            cotangents.iter().cloned().map(Ok).chain(none).collect()
        })
        .jvp(move |_, tangents| Ok(tangents[..n].to_vec()))
        .vmap(move |args, axes| Ok((depends(&args[..n], &args[n..])?, axes[..n].to_vec())))
        .into_fn();
    identity(&[inputs, dependencies].concat())
}

/// `f` whose reverse-mode derivative recomputes `f`'s forward pass from its arguments instead of
/// keeping its intermediates alive: trades compute for memory (apply it to the blocks of a deep
/// model; the block boundaries are all that stays alive between forward and backward). Arrays
/// `f` captures are differentiated too, and the recomputation draws the same random numbers as
/// the forward pass (it replays the random state of the call, leaving the global state alone).
pub fn checkpoint(f: impl Function + Send + Sync + 'static) -> impl Function + Clone + Send + Sync + 'static {
    let f = Arc::new(f);
    let forward = f.clone();
    // The random state at the call travels as a last (integer, so never differentiated) argument.
    let fun = move |args: &[Array]| forward(&args[..args.len() - 1]);
    let recompute = move |args: &[Array]| {
        let (args, state) = args.split_at(args.len() - 1);
        crate::ops::random::with_replayed_state(&state[0], || f(args))
    };
    let rules = Arc::new(Rules {
        name: "checkpoint".into(),
        vjp: None,
        jvp: None,
        vmap: None,
        recompute: Some(Arc::new(recompute)),
    });
    move |args: &[Array]| {
        let mut with_state = args.to_vec();
        with_state.push(crate::random::state());
        call(&rules, &fun, &with_state)
    }
}
