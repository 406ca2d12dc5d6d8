//! Reverse mode (`vjp`, `grad`, `value_and_grad`) and forward mode (`jvp`) differentiation.
//!
//! The function runs on tracers: identity views of the primal values, new nodes that mark where
//! the differentiated inputs enter. The function may read values (the tracers have data), and
//! nodes it evaluates during the trace keep their graph for the walk. The walk then covers only
//! the section of the graph between the tracers and the outputs ([`Section`]) and applies each
//! op's rule; rules are built from ordinary lazy ops, so the result is a graph again, evaluated
//! when the caller wants it, and differentiable again.

use super::custom::Rules;
use super::graph::{Section, Visit};
use super::{jvp_rules, vjp_rules, Function, TraceGuard};
use crate::array::Array;
use crate::error::{Error, Result};
use crate::ops;
use crate::primitive::Op;
use crate::shape::fmt_shape;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// New identity nodes over `primals`: the leaves a derivative is taken with respect to. They
/// insert no axes, so they follow any input shape (shapeless compile of a gradient).
pub(crate) fn tracers(primals: &[Array]) -> Result<Vec<Array>> {
    primals.iter().map(|p| Array::from_op(Op::ExpandDims(Vec::new()), vec![p.clone()])).collect()
}

/// Whether `op` is the identity [`tracers`] marks a differentiated input with.
pub(crate) fn is_tracer_op(op: &Op) -> bool {
    matches!(op, Op::ExpandDims(axes) if axes.is_empty())
}

/// Runs `f` on `args`, checking that it returned at least one array. The caller holds a
/// [`TraceGuard`] until its walk is done.
pub(crate) fn trace(transform: &str, f: &dyn Function, args: &[Array]) -> Result<Vec<Array>> {
    let outputs = f(args)?;
    if outputs.is_empty() {
        return Err(Error::value(transform, "the function returned no arrays; it must return at least one"));
    }
    Ok(outputs)
}

/// `x` unchanged, but with a zero derivative: gradients do not flow through it.
pub fn stop_gradient(x: &Array) -> Result<Array> {
    Array::from_op(Op::StopGradient, vec![x.clone()])
}

/// The outputs of `f` at `primals`, and the vector-Jacobian product: for each primal, the sum
/// over outputs of `cotangent_i · ∂output_i/∂primal`. One cotangent per output, of its shape.
/// As in mlx, integer and bool outputs carry no gradient (their cotangents contribute nothing)
/// and integer or bool primals get zeros; [`grad`] instead refuses them with an error.
pub fn vjp(f: impl Function, primals: &[Array], cotangents: &[Array]) -> Result<(Vec<Array>, Vec<Array>)> {
    let _trace = TraceGuard::enter();
    let leaves = tracers(primals)?;
    let outputs = trace("vjp", &f, &leaves)?;
    check_one_each("vjp", "got", cotangents, "cotangent", &outputs, "output")?;
    let grads = backward(&outputs, &leaves, cotangents, true)?;
    Ok((outputs, grads))
}

/// The outputs of `f` at `primals`, and the Jacobian-vector product: for each output, the sum
/// over primals of `∂output/∂primal_j · tangent_j`. One tangent per primal, of its shape.
/// Integer tangents flow through integer ops as mlx's do (the jvp of a sum of integers is the
/// sum of their tangents); bool primals do not vary, and bool outputs get zero tangents.
pub fn jvp(f: impl Function, primals: &[Array], tangents: &[Array]) -> Result<(Vec<Array>, Vec<Array>)> {
    check_one_each("jvp", "got", tangents, "tangent", primals, "primal")?;
    let _trace = TraceGuard::enter();
    let leaves = tracers(primals)?;
    let outputs = trace("jvp", &f, &leaves)?;
    let tangents = forward(&outputs, &leaves, tangents)?;
    Ok((outputs, tangents))
}

/// Checks that `given` holds one array per entry of `expected`, shape for shape: cotangents
/// per output, tangents per primal, or what a custom rule returned. Errors come from `op` and
/// their messages start with `source` ("got", "the custom vjp returned").
pub(crate) fn check_one_each(op: &str, source: &str, given: &[Array], what: &str, expected: &[Array], of: &str) -> Result<()> {
    if given.len() != expected.len() {
        return Err(Error::value(
            op,
            format!("{source} {} {what}s for {} {of}s; give one {what} per {of}", given.len(), expected.len()),
        ));
    }
    for (i, (g, e)) in given.iter().zip(expected).enumerate() {
        if g.shape() != e.shape() {
            return Err(Error::shape(
                op,
                format!(
                    "{source} {what} {i} of shape {} for {of} {i} of shape {}; each {what} must match its {of}",
                    fmt_shape(g.shape()),
                    fmt_shape(e.shape())
                ),
            ));
        }
    }
    Ok(())
}

/// `f`'s gradient with respect to the arguments `argnums`: `f` must return a scalar loss first
/// (further outputs are ignored). The result returns one gradient per entry of `argnums`.
pub fn grad(f: impl Function, argnums: &[usize]) -> impl Function {
    let vg = value_and_grad(f, argnums);
    move |args: &[Array]| Ok(vg(args)?.1)
}

/// Like [`grad`], but also returns `f`'s outputs: `(outputs, gradients)`. As in mlx, `f` may
/// return more than the loss; the loss is its first output.
pub fn value_and_grad(
    f: impl Function,
    argnums: &[usize],
) -> impl Fn(&[Array]) -> Result<(Vec<Array>, Vec<Array>)> {
    let argnums = argnums.to_vec();
    move |args: &[Array]| {
        check_argnums(&argnums, args)?;
        let _trace = TraceGuard::enter();
        let wrt: Vec<Array> = argnums.iter().map(|&i| args[i].clone()).collect();
        let leaves = tracers(&wrt)?;
        let mut full = args.to_vec();
        for (&i, leaf) in argnums.iter().zip(&leaves) {
            full[i] = leaf.clone();
        }
        let outputs = trace("grad", &f, &full)?;
        let loss = &outputs[0];
        if loss.size() != 1 {
            return Err(Error::shape(
                "grad",
                format!(
                    "the function must return a scalar loss as its first output, got shape {}; reduce it (e.g. with sum or mean)",
                    fmt_shape(loss.shape())
                ),
            ));
        }
        // An integer loss has gradients with respect to integer arguments only (computed in
        // integer arithmetic, as mlx does); a float argument's path through it was cast away.
        let integer_args = wrt.iter().any(|a| a.dtype().is_integer());
        if !(loss.dtype().is_float() || (loss.dtype().is_integer() && integer_args)) {
            return Err(Error::dtype(
                "grad",
                format!("the loss has dtype {}: only floating-point outputs have gradients", loss.dtype()),
            ));
        }
        let seed = ops::ones_like(loss)?;
        let grads = backward(std::slice::from_ref(loss), &leaves, &[seed], true)?;
        Ok((outputs, grads))
    }
}

fn check_argnums(argnums: &[usize], args: &[Array]) -> Result<()> {
    if argnums.is_empty() {
        return Err(Error::value("grad", "argnums is empty: name at least one argument to differentiate"));
    }
    for (k, &i) in argnums.iter().enumerate() {
        if i >= args.len() {
            return Err(Error::value(
                "grad",
                format!("argnums contains {i} but the function was called with {} arguments", args.len()),
            ));
        }
        if argnums[..k].contains(&i) {
            return Err(Error::value("grad", format!("argnums contains {i} twice")));
        }
        if !carries_cotangent(args[i].dtype()) {
            return Err(Error::dtype(
                "grad",
                format!(
                    "argument {i} has dtype {}: booleans have no gradient (cast it to a float dtype with astype)",
                    args[i].dtype()
                ),
            ));
        }
    }
    Ok(())
}

/// Whether values of `dtype` carry cotangents: floats and complex numbers, and integers (as in
/// mlx, an integer argument's gradient is computed in its dtype; a float value's path through an
/// integer cast carries nothing, see the cast's vjp); booleans never do.
fn carries_cotangent(dtype: crate::dtype::Dtype) -> bool {
    dtype.is_inexact() || dtype.is_integer()
}

/// `ct` made to fit `input`: summed over broadcast axes and cast to its dtype. `None` for inputs
/// without gradients (bool).
fn fit_cotangent(ct: Array, input: &Array) -> Result<Option<Array>> {
    if !carries_cotangent(input.dtype()) {
        return Ok(None);
    }
    let ct = vjp_rules::unbroadcast(ct, input)?;
    Ok(Some(ops::astype(&ct, input.dtype())?))
}

/// `t` made to fit `output`: broadcast to its shape and cast to its dtype.
fn fit_tangent(t: Array, output: &Array) -> Result<Array> {
    let t = if t.shape() == output.shape() { t } else { ops::broadcast_to(&t, output.shape())? };
    ops::astype(&t, output.dtype())
}

/// Cotangents accumulated per node id.
struct Cotangents(HashMap<usize, Array>);

impl Cotangents {
    fn add(&mut self, node: &Array, ct: Array) -> Result<()> {
        let Some(ct) = fit_cotangent(ct, node)? else { return Ok(()) };
        let sum = match self.0.remove(&node.id()) {
            Some(prev) => ops::add(&prev, &ct)?,
            None => ct,
        };
        self.0.insert(node.id(), sum);
        Ok(())
    }
}

/// A gather's or scatter's indices computed from a differentiated integer argument (not through
/// `stop_gradient`) have no gradient: an error naming the fix, as in mlx, rather than a silent
/// zero.
fn refuse_differentiated_indices(op: &Op, inputs: &[Array], integer_leaves: &HashSet<usize>) -> Result<()> {
    let indices = match op {
        Op::Gather { .. } => &inputs[1..],
        Op::Scatter { .. } => &inputs[1..inputs.len() - 1],
        _ => return Ok(()),
    };
    if indices.iter().any(|i| reaches_unstopped(i, integer_leaves)) {
        return Err(Error::value(
            op.name(),
            "cannot compute the vjp with respect to the indices (they come from a differentiated \
             argument); apply stop_gradient to the indices, or leave that argument out of the \
             differentiated ones",
        ));
    }
    Ok(())
}

/// Whether `a` is or depends on one of `leaves` along a path without `stop_gradient`.
fn reaches_unstopped(a: &Array, leaves: &HashSet<usize>) -> bool {
    let mut stack = vec![a.clone()];
    let mut seen = HashSet::new();
    while let Some(x) = stack.pop() {
        if leaves.contains(&x.id()) {
            return true;
        }
        if !seen.insert(x.id()) {
            continue;
        }
        match x.op_and_inputs() {
            Some((Op::StopGradient, _)) | None => {}
            Some((_, inputs)) => stack.extend(inputs),
        }
    }
    false
}

/// Cotangents of the outputs of one custom call gathered until its last output is reached.
struct PendingCall {
    remaining: usize,
    cotangents: Vec<Option<Array>>,
}

/// Reverse-mode walk: the cotangent of each leaf given the outputs' cotangents (zeros for leaves
/// the outputs do not depend on).
/// With `refuse_integer_indices` (the user's vjp and grad), a gather's or scatter's indices
/// computed from an integer leaf are an error (see [`refuse_differentiated_indices`]).
pub(crate) fn backward(outputs: &[Array], leaves: &[Array], cotangents: &[Array], refuse_integer_indices: bool) -> Result<Vec<Array>> {
    let section = Section::between(outputs, leaves);
    let integer_leaves: HashSet<usize> =
        leaves.iter().filter(|l| refuse_integer_indices && l.dtype().is_integer()).map(Array::id).collect();
    let mut cts = Cotangents(HashMap::new());
    for (o, c) in outputs.iter().zip(cotangents) {
        if section.reaches(o) {
            cts.add(o, c.clone())?;
        }
    }
    let mut counts = section.custom_call_counts();
    let mut calls: HashMap<usize, PendingCall> = HashMap::new();
    for v in section.order.iter().rev() {
        let ct = cts.0.remove(&v.node.id());
        if let Op::Custom { index, call } = &v.op {
            if call.rules().vjp.is_some() || call.rules().recompute.is_some() {
                let n = call.outputs();
                let entry = calls.entry(call.id()).or_insert_with(|| PendingCall {
                    remaining: counts.remove(&call.id()).unwrap_or(1),
                    cotangents: vec![None; n],
                });
                entry.cotangents[*index] = ct;
                entry.remaining -= 1;
                if entry.remaining == 0 {
                    let pending = calls.remove(&call.id()).expect("entry just seen");
                    custom_vjp(call.rules(), v, (n, call.arguments()), pending.cotangents, &section, &mut cts)?;
                }
                continue;
            }
        }
        let Some(ct) = ct else { continue };
        if !carries_cotangent(v.node.dtype()) {
            continue;
        }
        if !integer_leaves.is_empty() {
            refuse_differentiated_indices(&v.op, &v.inputs, &integer_leaves)?;
        }
        let input_cts = vjp_rules::vjp(&v.op, &v.inputs, &v.node, &ct)?;
        for (input, ict) in v.inputs.iter().zip(input_cts) {
            if let Some(ict) = ict {
                if section.reaches(input) {
                    cts.add(input, ict)?;
                }
            }
        }
    }
    leaves
        .iter()
        .map(|l| match cts.0.remove(&l.id()) {
            Some(c) => Ok(c),
            None => ops::zeros_like(l),
        })
        .collect()
}

/// Applies a custom call's reverse rule: `v` is one of its output nodes (they share the input
/// list: `counts.0` outputs, `counts.1` explicit arguments, then the captured arrays).
fn custom_vjp(
    rules: &Arc<Rules>,
    v: &Visit,
    counts: (usize, usize),
    output_cts: Vec<Option<Array>>,
    section: &Section,
    cts: &mut Cotangents,
) -> Result<()> {
    if output_cts.iter().all(Option::is_none) {
        return Ok(());
    }
    let (outputs, rest) = v.inputs.split_at(counts.0);
    let output_cts = output_cts
        .into_iter()
        .zip(outputs)
        .map(|(c, o)| c.map_or_else(|| ops::zeros_like(o), Ok))
        .collect::<Result<Vec<_>>>()?;
    let (targets, input_cts) = match (&rules.recompute, &rules.vjp) {
        (Some(forward), _) => {
            // checkpoint: run the forward pass again, from the arguments and captured arrays.
            let (args, captured) = rest.split_at(counts.1);
            let mut leaves = tracers(args)?;
            let again = forward(&leaves)?;
            leaves.extend(captured.iter().cloned());
            (rest, backward(&again, &leaves, &output_cts, false)?)
        }
        (None, Some(rule)) => {
            let (args, captured) = rest.split_at(counts.1);
            check_captured(rules, captured, |_, c| section.reaches(c), "differentiate")?;
            let arg_cts = rule(args, &output_cts, outputs)?;
            check_one_each(&rules.name, "the custom vjp returned", &arg_cts, "cotangent", args, "argument")?;
            (args, arg_cts)
        }
        (None, None) => unreachable!("the walk only calls custom_vjp for calls with a reverse rule"),
    };
    for (target, ct) in targets.iter().zip(input_cts) {
        if section.reaches(target) {
            cts.add(target, ct)?;
        }
    }
    Ok(())
}

/// A user rule sees only the explicit arguments: transforming through an array the function
/// captured instead (`involved`) would silently treat it as a constant, so it is an error.
pub(crate) fn check_captured(
    rules: &Rules,
    captured: &[Array],
    involved: impl Fn(usize, &Array) -> bool,
    what: &str,
) -> Result<()> {
    if let Some((_, c)) = captured.iter().enumerate().find(|(i, c)| involved(*i, c)) {
        return Err(Error::value(
            &rules.name,
            format!(
                "the function uses an array it captured (shape {}, dtype {}) that the transform must {what} \
                 through, but its custom rules only see the arguments; pass that array as an argument",
                fmt_shape(c.shape()),
                c.dtype()
            ),
        ));
    }
    Ok(())
}

/// Forward-mode walk: the tangent of each output given the leaves' tangents (zeros for outputs
/// that do not depend on the leaves).
pub(crate) fn forward(outputs: &[Array], leaves: &[Array], tangents: &[Array]) -> Result<Vec<Array>> {
    let section = Section::between(outputs, leaves);
    let mut tans: HashMap<usize, Array> = HashMap::new();
    // Integer values carry tangents too (mlx: the jvp of `sum` over integers is the sum of
    // their tangents); booleans do not vary.
    let varies = |d: crate::dtype::Dtype| d.is_inexact() || d.is_integer();
    for (l, t) in leaves.iter().zip(tangents) {
        if varies(l.dtype()) {
            tans.insert(l.id(), fit_tangent(t.clone(), l)?);
        }
    }
    let mut custom_results: HashMap<usize, Vec<Array>> = HashMap::new();
    // Nodes whose tangent could not be formed, with why. The walk also meets the insides of
    // custom functions (a user kernel, say), whose tangents the call's jvp rule makes needless:
    // such a failure is an error only where a tangent that is needed depends on it.
    let mut failed: HashMap<usize, Error> = HashMap::new();
    for v in &section.order {
        if !varies(v.node.dtype()) {
            continue;
        }
        let custom_rule = match &v.op {
            Op::Custom { call, .. } if call.rules().jvp.is_some() => Some(call.outputs()),
            _ => None,
        };
        let needed = &v.inputs[custom_rule.unwrap_or(0)..];
        if let Some(e) = needed.iter().find_map(|i| failed.get(&i.id())) {
            failed.insert(v.node.id(), e.clone());
            continue;
        }
        let tin: Vec<Option<Array>> = v.inputs.iter().map(|i| tans.get(&i.id()).cloned()).collect();
        if tin.iter().all(Option::is_none) {
            continue;
        }
        let t = match &v.op {
            Op::Custom { index, call } if custom_rule.is_some() => {
                let results = match custom_results.entry(call.id()) {
                    Entry::Occupied(e) => e.into_mut(),
                    Entry::Vacant(e) => e.insert(custom_jvp(call.rules(), v, (call.outputs(), call.arguments()), &tin)?),
                };
                Some(results[*index].clone())
            }
            _ => match jvp_rules::jvp(&v.op, &v.inputs, &v.node, &tin) {
                Ok(t) => t,
                Err(e) => {
                    failed.insert(v.node.id(), e);
                    continue;
                }
            },
        };
        if let Some(t) = t {
            tans.insert(v.node.id(), fit_tangent(t, &v.node)?);
        }
    }
    if let Some(e) = outputs.iter().find_map(|o| failed.get(&o.id())) {
        return Err(e.clone());
    }
    // An output nothing flows into has zero tangent in its own dtype, but a boolean one (a
    // comparison) has it in the first tangent's dtype, as in mlx.
    let tangent_dtype = tangents.first().map(|t| t.dtype());
    outputs
        .iter()
        .map(|o| match (tans.get(&o.id()), tangent_dtype) {
            (Some(t), _) => Ok(t.clone()),
            (None, Some(d)) if o.dtype() == crate::dtype::Dtype::Bool => ops::astype(ops::zeros_like(o)?, d),
            (None, _) => ops::zeros_like(o),
        })
        .collect()
}

/// Applies a custom call's jvp to the tangents of its arguments.
fn custom_jvp(rules: &Arc<Rules>, v: &Visit, counts: (usize, usize), tin: &[Option<Array>]) -> Result<Vec<Array>> {
    let (n, na) = counts;
    let (args, captured) = v.inputs[n..].split_at(na);
    let captured_tangents = &tin[n + na..];
    check_captured(rules, captured, |i, _| captured_tangents[i].is_some(), "differentiate")?;
    let arg_tangents = tin[n..n + na]
        .iter()
        .zip(args)
        .map(|(t, a)| t.clone().map_or_else(|| ops::zeros_like(a), Ok))
        .collect::<Result<Vec<_>>>()?;
    let rule = rules.jvp.as_ref().expect("caller checked");
    let out = rule(args, &arg_tangents)?;
    check_one_each(&rules.name, "the custom jvp returned", &out, "tangent", &v.inputs[..n], "output")?;
    Ok(out)
}
