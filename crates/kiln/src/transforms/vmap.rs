//! `vmap`: a function of one example made into a function of a batch. The function is traced
//! once on data-less placeholders of the per-example shapes; the traced graph is then rewritten
//! node by node with the batching rules, so the batched function runs each op once on the whole
//! batch.

use super::batching::{batch, to_front, Batched};
use super::autodiff::check_captured;
use super::custom::{wrap_outputs, JvpRule, Rules, VjpRule};
use super::graph::Section;
use super::Function;
use crate::array::Array;
use crate::error::{Error, Result};
use crate::ops;
use crate::primitive::Op;
use crate::shape::{fmt_shape, normalize_axis};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::Arc;

/// `f` mapped over axis `in_axes[i]` of argument `i` (`None`: the argument is shared by every
/// example); output `j` gets its batch axis at `out_axes[j]`. A single entry applies to all
/// arguments (or outputs). Axes may be negative.
///
/// ```
/// use kiln::{transforms::vmap, ops, Array};
/// let dot = |x: &[Array]| Ok(vec![ops::sum(ops::multiply(&x[0], &x[1])?, None, false)?]);
/// let batched = vmap(dot, &[Some(0), None], &[Some(0)]);
/// let a = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
/// let b = Array::from_vec(vec![10.0f32, 1.0]);
/// assert_eq!(batched(&[a, b]).unwrap()[0].to_vec::<f32>().unwrap(), vec![12.0, 34.0]);
/// ```
pub fn vmap(f: impl Function, in_axes: &[Option<i64>], out_axes: &[Option<i64>]) -> impl Function {
    let (in_axes, out_axes) = (in_axes.to_vec(), out_axes.to_vec());
    move |args: &[Array]| {
        let axes = per_item("in_axes", &in_axes, args.len(), "arguments")?;
        let (size, batched) = resolve_inputs(args, &axes)?;
        let mut leaves = Vec::new();
        let mut traced_args = Vec::new();
        let mut values: HashMap<usize, Batched> = HashMap::new();
        for (arg, ax) in args.iter().zip(&batched) {
            match ax {
                Some(ax) => {
                    let mut shape = arg.shape().to_vec();
                    shape.remove(*ax);
                    let p = Array::placeholder(&shape, arg.dtype(), "vmap");
                    values.insert(p.id(), (arg.clone(), Some(*ax)));
                    leaves.push(p.clone());
                    traced_args.push(p);
                }
                None => traced_args.push(arg.clone()),
            }
        }
        let outputs = f(&traced_args)?;
        let section = Section::between(&outputs, &leaves);
        let mut calls: HashMap<usize, Vec<Batched>> = HashMap::new();
        // Nodes that could not be batched, and those computed from them: an error only if an
        // output needs one. A custom call with its own vmap rule never reads the outputs of its
        // body (which may hold a host kernel, say), only its arguments.
        let mut failed: HashMap<usize, Error> = HashMap::new();
        for v in &section.order {
            let body_outputs = match &v.op {
                Op::Custom { call, .. } if call.rules().vmap.is_some() => call.outputs(),
                _ => 0,
            };
            if let Some(e) = v.inputs.iter().skip(body_outputs).find_map(|i| failed.get(&i.id())) {
                failed.insert(v.node.id(), e.clone());
                continue;
            }
            let inputs: Vec<Batched> =
                v.inputs.iter().map(|i| values.get(&i.id()).cloned().unwrap_or((i.clone(), None))).collect();
            let out = match &v.op {
                Op::Custom { index, call } => {
                    let batched = match calls.entry(call.id()) {
                        Entry::Occupied(e) => e.into_mut(),
                        Entry::Vacant(e) => e.insert(batch_custom(call.rules(), (call.outputs(), call.arguments()), &inputs, size)?),
                    };
                    batched[*index].clone()
                }
                op => match batch(op, &inputs, size) {
                    Ok(out) => out,
                    Err(e) => {
                        failed.insert(v.node.id(), Error { message: format!("{} (batching {})", e.message, op.name()), ..e });
                        continue;
                    }
                },
            };
            values.insert(v.node.id(), out);
        }
        if let Some(e) = outputs.iter().find_map(|o| failed.get(&o.id())) {
            return Err(e.clone());
        }
        let oaxes = per_item("out_axes", &out_axes, outputs.len(), "outputs")?;
        outputs
            .iter()
            .zip(oaxes)
            .enumerate()
            .map(|(j, (o, ax))| {
                let value = values.get(&o.id()).cloned().unwrap_or((o.clone(), None));
                place_output(j, value, ax, size)
            })
            .collect()
    }
}

/// One axis per item from `axes`, where a single entry applies to all.
fn per_item(what: &str, axes: &[Option<i64>], n: usize, items: &str) -> Result<Vec<Option<i64>>> {
    match axes.len() {
        1 => Ok(vec![axes[0]; n]),
        len if len == n => Ok(axes.to_vec()),
        len => Err(Error::value(
            "vmap",
            format!("{what} has {len} entries but the function has {n} {items}; give one per item, or a single one for all"),
        )),
    }
}

/// The batch size and each argument's normalised batch axis; every batched axis must agree.
fn resolve_inputs(args: &[Array], axes: &[Option<i64>]) -> Result<(usize, Vec<Option<usize>>)> {
    let mut size: Option<(usize, usize)> = None;
    let mut out = Vec::with_capacity(args.len());
    for (i, (arg, ax)) in args.iter().zip(axes).enumerate() {
        let Some(ax) = ax else {
            out.push(None);
            continue;
        };
        let a = normalize_axis("vmap", *ax, arg.ndim()).map_err(|_| {
            Error::axis(
                "vmap",
                format!("in_axes[{i}] = {ax} is out of range for argument {i} of shape {}", fmt_shape(arg.shape())),
            )
        })?;
        let n = arg.shape()[a];
        match size {
            Some((m, j)) if m != n => {
                return Err(Error::shape(
                    "vmap",
                    format!("argument {j} has batch size {m} but argument {i} has batch size {n}; batched axes must agree"),
                ))
            }
            None => size = Some((n, i)),
            _ => {}
        }
        out.push(Some(a));
    }
    let Some((size, _)) = size else {
        return Err(Error::value("vmap", "no argument is batched: at least one entry of in_axes must be an axis"));
    };
    Ok((size, out))
}

/// A batched output moved to its requested axis (unbatched ones are broadcast along it).
fn place_output(j: usize, value: Batched, ax: Option<i64>, size: usize) -> Result<Array> {
    let Some(ax) = ax else {
        return match value.1 {
            None => Ok(value.0),
            Some(_) => Err(Error::value(
                "vmap",
                format!("output {j} depends on a batched argument, so out_axes[{j}] cannot be None"),
            )),
        };
    };
    let front = to_front(&value, size)?;
    let target = normalize_axis("vmap", ax, front.ndim()).map_err(|_| {
        Error::axis("vmap", format!("out_axes[{j}] = {ax} is out of range for output {j} of shape {}", fmt_shape(&front.shape()[1..])))
    })?;
    ops::moveaxis(&front, 0, target as i64)
}

/// A custom call batched: its own batching rule when it has one; otherwise its forward outputs
/// batched by the ordinary rules, wrapped in a new call whose derivatives are the original rules
/// vmapped, so a custom derivative survives vmap. A checkpoint, or a call whose captured arrays
/// are batched and that has no user rule, is left as its batched forward graph (correct, but not
/// checkpointed under vmap).
fn batch_custom(rules: &Arc<Rules>, counts: (usize, usize), inputs: &[Batched], size: usize) -> Result<Vec<Batched>> {
    let (n, na) = counts;
    let (args, captured) = inputs[n..].split_at(na);
    let captured_batched = captured.iter().any(|c| c.1.is_some());
    if rules.recompute.is_some() || (captured_batched && !rules.has_user_rule()) {
        return Ok(inputs[..n].to_vec());
    }
    let arrays: Vec<Array> = captured.iter().map(|c| c.0.clone()).collect();
    check_captured(rules, &arrays, |i, _| captured[i].1.is_some(), "batch")?;
    if let Some(rule) = &rules.vmap {
        let arrays: Vec<Array> = args.iter().map(|a| a.0.clone()).collect();
        let axes: Vec<Option<usize>> = args.iter().map(|a| a.1).collect();
        let (outs, out_axes) = rule(&arrays, &axes)?;
        if outs.len() != n || out_axes.len() != n {
            return Err(Error::value(
                &rules.name,
                format!("the custom vmap returned {} outputs and {} axes for {n} outputs", outs.len(), out_axes.len()),
            ));
        }
        for (j, (o, ax)) in outs.iter().zip(&out_axes).enumerate() {
            if let Some(ax) = *ax {
                if ax >= o.ndim() || o.shape()[ax] != size {
                    return Err(Error::shape(
                        &rules.name,
                        format!(
                            "the custom vmap rule gave output {j} of shape {} batch axis {ax}, but the batch size is {size}",
                            fmt_shape(o.shape())
                        ),
                    ));
                }
            }
        }
        return Ok(outs.into_iter().zip(out_axes).collect());
    }
    let outs = inputs[..n].iter().map(|o| to_front(o, size)).collect::<Result<Vec<_>>>()?;
    let batched_args = args.iter().map(|a| to_front(a, size)).collect::<Result<Vec<_>>>()?;
    let batched_rules = Arc::new(Rules {
        name: rules.name.clone(),
        vjp: rules.vjp.clone().map(vmapped_vjp),
        jvp: rules.jvp.clone().map(vmapped_jvp),
        vmap: None,
        recompute: None,
    });
    let wrapped = wrap_outputs(&batched_rules, &outs, &batched_args, &arrays)?;
    Ok(wrapped.into_iter().map(|w| (w, Some(0))).collect())
}

/// A custom vjp applied per example over front-batched arguments, cotangents and outputs.
fn vmapped_vjp(rule: VjpRule) -> VjpRule {
    Arc::new(move |args: &[Array], cts: &[Array], outs: &[Array]| {
        let (na, no) = (args.len(), cts.len());
        let per_example = {
            let rule = rule.clone();
            move |xs: &[Array]| rule(&xs[..na], &xs[na..na + no], &xs[na + no..])
        };
        let all: Vec<Array> = args.iter().chain(cts).chain(outs).cloned().collect();
        vmap(per_example, &[Some(0)], &[Some(0)])(&all)
    })
}

/// A custom jvp applied per example over front-batched arguments and tangents.
fn vmapped_jvp(rule: JvpRule) -> JvpRule {
    Arc::new(move |args: &[Array], tangents: &[Array]| {
        let na = args.len();
        let per_example = {
            let rule = rule.clone();
            move |xs: &[Array]| rule(&xs[..na], &xs[na..])
        };
        let all: Vec<Array> = args.iter().chain(tangents).cloned().collect();
        vmap(per_example, &[Some(0)], &[Some(0)])(&all)
    })
}
