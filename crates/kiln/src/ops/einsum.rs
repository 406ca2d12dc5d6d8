//! Einstein summation: `einsum` and the contraction order it follows, `einsum_path`.
//!
//! Subscripts are parsed into one label per axis: letters as written, `...` expanded into fresh
//! labels (right-aligned across operands, so ellipsis axes broadcast as numpy's do), and an index
//! of size 1 broadcasts against the same index elsewhere. A label repeated within one operand
//! takes that operand's diagonal. Operands are then contracted in the order of a greedy path:
//! at each step the pair whose product removes the most elements (then costs the fewest
//! multiply-adds) among pairs that share an index, as numpy's `einsum_path` chooses with its
//! default `greedy` strategy, whose cost model `einsum_path`'s report uses too. Each pairwise
//! contraction is one batched matmul.

use super::AsArray;
use crate::array::Array;
use crate::error::{Error, Result};
use crate::shape::fmt_shape;
use std::collections::{BTreeMap, BTreeSet};

/// A parsed contraction: each operand's labels (one per axis), the output's, and each label's
/// size after broadcasting.
struct Spec {
    inputs: Vec<Vec<char>>,
    output: Vec<char>,
    sizes: BTreeMap<char, usize>,
}

/// Splits one subscript term into its letters and the position of its ellipsis, if any.
fn term(op: &str, t: &str) -> Result<(Vec<char>, Option<usize>)> {
    let mut letters = Vec::new();
    let mut ellipsis = None;
    let mut rest = t;
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix("...") {
            if ellipsis.replace(letters.len()).is_some() {
                return Err(Error::value(op, format!("subscripts '{t}' hold more than one ellipsis ('...'); one per operand is allowed")));
            }
            rest = after;
        } else if c.is_ascii_alphabetic() {
            letters.push(c);
            rest = &rest[1..];
        } else {
            return Err(Error::value(op, format!("subscripts must be letters or '...', got '{c}' in '{t}'")));
        }
    }
    Ok((letters, ellipsis))
}

/// Parses `subscripts` against the operands' shapes.
fn parse(op: &str, subscripts: &str, shapes: &[&[usize]]) -> Result<Spec> {
    let s: String = subscripts.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match s.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (s.as_str(), None),
    };
    let terms = lhs.split(',').map(|t| term(op, t)).collect::<Result<Vec<_>>>()?;
    if terms.len() != shapes.len() {
        return Err(Error::value(op, format!("'{subscripts}' has {} operand terms but {} operands were given", terms.len(), shapes.len())));
    }
    let mut spans = Vec::with_capacity(terms.len());
    for ((letters, ellipsis), shape) in terms.iter().zip(shapes) {
        let span = shape.len().checked_sub(letters.len()).filter(|&n| n == 0 || ellipsis.is_some()).ok_or_else(|| {
            let t: String = letters.iter().collect();
            Error::value(op, format!("subscripts '{t}' name {} axes but the operand has shape {}", letters.len(), fmt_shape(shape)))
        })?;
        spans.push(span);
    }
    // Fresh labels for the ellipsis axes: letters no term uses.
    let longest = spans.iter().copied().max().unwrap_or(0);
    let fresh: Vec<char> = ('a'..='z').chain('A'..='Z').filter(|c| !s.contains(*c)).take(longest).collect();
    if fresh.len() < longest {
        return Err(Error::value(op, format!("'{subscripts}' leaves too few unused letters for its {longest} ellipsis axes")));
    }
    let expand = |(letters, ellipsis): &(Vec<char>, Option<usize>), span: usize| -> Vec<char> {
        let at = ellipsis.unwrap_or(letters.len());
        [&letters[..at], &fresh[longest - span..], &letters[at..]].concat()
    };
    let inputs: Vec<Vec<char>> = terms.iter().zip(&spans).map(|(t, &span)| expand(t, span)).collect();
    let mut sizes = BTreeMap::new();
    for (i, (labels, shape)) in inputs.iter().zip(shapes).enumerate() {
        for (&c, &d) in labels.iter().zip(shape.iter()) {
            let size = sizes.entry(c).or_insert(d);
            if *size != d && *size != 1 && d != 1 {
                return Err(Error::shape(
                    op,
                    format!("index '{c}' has size {size} elsewhere but {d} in operand {i} of shape {}; sizes must match or be 1", fmt_shape(shape)),
                ));
            }
            // A size of 1 broadcasts against any other, 0 included.
            if *size == 1 {
                *size = d;
            }
        }
    }
    let output = match rhs {
        Some(r) => {
            let (letters, ellipsis) = term(op, r)?;
            let output = expand(&(letters, ellipsis), if ellipsis.is_some() { longest } else { 0 });
            for (i, c) in output.iter().enumerate() {
                if !sizes.contains_key(c) || output[..i].contains(c) {
                    return Err(Error::value(op, format!("output index '{c}' of '{subscripts}' is repeated or in no operand")));
                }
            }
            output
        }
        // numpy's implicit output: the ellipsis axes, then the letters used once, sorted.
        None => {
            let once = sizes.keys().copied().filter(|c| !fresh.contains(c) && inputs.iter().flatten().filter(|&x| x == c).count() == 1);
            fresh.iter().copied().chain(once).collect()
        }
    };
    Ok(Spec { inputs, output, sizes })
}

/// One operand made ready to contract: broadcast to its labels' sizes, and one axis per label
/// (a label repeated within it takes the diagonal).
fn prepare(op: &str, x: &Array, labels: &[char], sizes: &BTreeMap<char, usize>) -> Result<(Array, Vec<char>)> {
    let full: Vec<usize> = labels.iter().map(|c| sizes[c]).collect();
    let mut x = if x.shape() == full.as_slice() { x.clone() } else { super::shape::broadcast_to(x, &full)? };
    let mut labels = labels.to_vec();
    while let Some((i, j)) = (0..labels.len()).find_map(|j| labels[..j].iter().position(|&c| c == labels[j]).map(|i| (i, j))) {
        x = super::index::diagonal(&x, 0, i as i64, j as i64).map_err(|e| Error::new(op, e.kind, e.message))?;
        let c = labels[i];
        labels.remove(j);
        labels.remove(i);
        labels.push(c);
    }
    Ok((x, labels))
}

/// The number of elements of an array with these labels (a repeated label counts each time, as
/// numpy sizes its terms), saturating at 2⁶⁴ rather than overflowing.
fn size_of<'a>(labels: impl IntoIterator<Item = &'a char>, sizes: &BTreeMap<char, usize>) -> u128 {
    labels.into_iter().fold(1u128, |n, c| n.saturating_mul(sizes[c] as u128)).min(u64::MAX as u128)
}

/// numpy's cost model of one contraction of `operands` terms over the union `labels`: the
/// product of all sizes, times the multiply-adds per element (one per extra term, one more when
/// `inner`).
fn flops(labels: &BTreeSet<char>, inner: bool, operands: usize, sizes: &BTreeMap<char, usize>) -> u128 {
    size_of(labels, sizes) * (operands.saturating_sub(1).max(1) + usize::from(inner)) as u128
}

/// A pairwise contraction the greedy search may take: its ranking (elements removed, then
/// cost), positions and the labels its result keeps.
struct Candidate {
    removed: i128,
    cost: u128,
    pair: (usize, usize),
    result: BTreeSet<char>,
}

/// The greedy path over label sets `terms` (numpy's `greedy` strategy): the positions each step
/// takes from the list of operands still to contract (its result goes to the end). Results are
/// never larger than `limit` elements and the total cost never exceeds the naive one; with one
/// or two operands, or nothing to sum, one step takes all.
fn greedy_path(terms: &[BTreeSet<char>], output: &BTreeSet<char>, sizes: &BTreeMap<char, usize>, limit: u128) -> Vec<Vec<usize>> {
    let all: BTreeSet<char> = terms.iter().flatten().copied().collect();
    if terms.len() <= 2 || all == *output {
        return vec![(0..terms.len()).collect()];
    }
    let naive = flops(&all, all.iter().any(|c| !output.contains(c)), terms.len(), sizes);
    let mut terms = terms.to_vec();
    let (mut steps, mut cost) = (Vec::new(), 0u128);
    let mut known: Vec<Candidate> = Vec::new();
    let mut pairs: Vec<(usize, usize)> = (0..terms.len()).flat_map(|i| (i + 1..terms.len()).map(move |j| (i, j))).collect();
    while terms.len() > 1 {
        let consider = |known: &mut Vec<Candidate>, pairs: &[(usize, usize)], outer: bool| {
            for &(x, y) in pairs {
                if !outer && terms[x].is_disjoint(&terms[y]) {
                    continue;
                }
                let joined: BTreeSet<char> = terms[x].union(&terms[y]).copied().collect();
                let needed = |c: &&char| output.contains(c) || terms.iter().enumerate().any(|(k, t)| k != x && k != y && t.contains(c));
                let result: BTreeSet<char> = joined.iter().filter(needed).copied().collect();
                let new_size = size_of(&result, sizes);
                let step_cost = flops(&joined, joined.len() > result.len(), 2, sizes);
                if new_size > limit || cost.saturating_add(step_cost) > naive {
                    continue;
                }
                let removed = (size_of(&terms[x], sizes) + size_of(&terms[y], sizes)) as i128 - new_size as i128;
                known.push(Candidate { removed, cost: step_cost, pair: (x, y), result });
            }
        };
        consider(&mut known, &pairs, false);
        if known.is_empty() {
            let every: Vec<(usize, usize)> = (0..terms.len()).flat_map(|i| (i + 1..terms.len()).map(move |j| (i, j))).collect();
            consider(&mut known, &every, true);
        }
        let Some(best) = known.iter().enumerate().min_by_key(|(_, c)| (-c.removed, c.cost)).map(|(i, _)| i) else {
            // Nothing fits the limits: the rest in one step, as numpy does.
            steps.push((0..terms.len()).collect());
            break;
        };
        let best = known.remove(best);
        let (bx, by) = best.pair;
        cost = cost.saturating_add(best.cost);
        steps.push(vec![bx, by]);
        let shift = |i: usize| i - usize::from(i > bx) - usize::from(i > by);
        known = known
            .into_iter()
            .filter(|c| ![bx, by].contains(&c.pair.0) && ![bx, by].contains(&c.pair.1))
            .map(|c| Candidate { pair: (shift(c.pair.0), shift(c.pair.1)), ..c })
            .collect();
        terms.remove(by);
        terms.remove(bx);
        terms.push(best.result);
        let last = terms.len() - 1;
        pairs = (0..last).map(|i| (i, last)).collect();
    }
    steps
}

/// The parsed spec of `subscripts` over `operands` and its greedy path; the memory limit is the
/// largest operand or output, as numpy's default.
fn plan(op: &str, subscripts: &str, operands: &[Array]) -> Result<(Spec, Vec<Vec<usize>>)> {
    if operands.is_empty() {
        return Err(Error::value(op, "at least one operand is required"));
    }
    let shapes: Vec<&[usize]> = operands.iter().map(|x| x.shape()).collect();
    let spec = parse(op, subscripts, &shapes)?;
    let sets: Vec<BTreeSet<char>> = spec.inputs.iter().map(|t| t.iter().copied().collect()).collect();
    let limit = spec.inputs.iter().chain([&spec.output]).map(|t| size_of(t, &spec.sizes)).max().unwrap_or(1);
    let path = greedy_path(&sets, &spec.output.iter().copied().collect(), &spec.sizes, limit);
    Ok((spec, path))
}

/// Einstein summation over `operands`, as numpy's and mlx's `einsum`: explicit (`->`) or
/// implicit outputs, `...`, broadcasting of size-1 indices, diagonals from repeated indices,
/// sums, transposes and products of any number of operands, contracted along the greedy path.
pub fn einsum(subscripts: &str, operands: &[Array]) -> Result<Array> {
    let op = "einsum";
    let (spec, path) = plan(op, subscripts, operands)?;
    let mut pending: Vec<(Array, Vec<char>)> = operands
        .iter()
        .zip(&spec.inputs)
        .map(|(x, labels)| prepare(op, x, labels, &spec.sizes))
        .collect::<Result<_>>()?;
    for step in &path {
        let mut group: Vec<(Array, Vec<char>)> = step.iter().rev().map(|&i| pending.remove(i)).collect();
        group.reverse();
        // Labels still needed after this step: the output's and those of operands outside it.
        let outside: Vec<Vec<char>> = pending.iter().map(|(_, t)| t.clone()).collect();
        let mut acc = sum_unneeded(op, group.remove(0), &spec.output, &[&outside[..], &labels_of(&group)].concat())?;
        for k in 0..group.len() {
            let later = [&outside[..], &labels_of(&group[k + 1..]), std::slice::from_ref(&acc.1)].concat();
            let rhs = sum_unneeded(op, group[k].clone(), &spec.output, &later)?;
            acc = contract_pair(op, acc, rhs, &spec.output, &[&outside[..], &labels_of(&group[k + 1..])].concat())?;
        }
        pending.push(acc);
    }
    let (x, labels) = sum_unneeded(op, pending.remove(0), &spec.output, &[])?;
    let perm: Vec<i64> = spec.output.iter().map(|c| labels.iter().position(|d| d == c).unwrap() as i64).collect();
    super::shape::transpose(&x, Some(&perm))
}

/// The labels of each operand in `group`.
fn labels_of(group: &[(Array, Vec<char>)]) -> Vec<Vec<char>> {
    group.iter().map(|(_, t)| t.clone()).collect()
}

/// The order in which [`einsum`] contracts `operands`: the positions each step takes from the
/// list of operands still to contract (its result goes to the end), and a report: the naive
/// and the path's cost and scaling in numpy's model, then each step.
pub fn einsum_path(subscripts: &str, operands: &[impl AsArray]) -> Result<(Vec<Vec<usize>>, String)> {
    let operands: Vec<Array> = operands.iter().map(|x| x.as_array()).collect();
    let (spec, path) = plan("einsum_path", subscripts, &operands)?;
    let output: BTreeSet<char> = spec.output.iter().copied().collect();
    let mut terms: Vec<BTreeSet<char>> = spec.inputs.iter().map(|t| t.iter().copied().collect()).collect();
    let all: BTreeSet<char> = terms.iter().flatten().copied().collect();
    let inner = terms.iter().map(BTreeSet::len).sum::<usize>() > all.len();
    let naive = flops(&all, inner, terms.len(), &spec.sizes);
    let (mut cost, mut scaling, mut lines) = (1u128, 0, String::new());
    let text = |t: &BTreeSet<char>| t.iter().collect::<String>();
    for (k, step) in path.iter().enumerate() {
        let taken: Vec<BTreeSet<char>> = step.iter().rev().map(|&i| terms.remove(i)).collect::<Vec<_>>().into_iter().rev().collect();
        let joined: BTreeSet<char> = taken.iter().flatten().copied().collect();
        let kept: BTreeSet<char> = joined.iter().copied().filter(|c| output.contains(c) || terms.iter().any(|t| t.contains(c))).collect();
        cost = cost.saturating_add(flops(&joined, joined.len() > kept.len(), step.len(), &spec.sizes));
        scaling = scaling.max(joined.len());
        lines += &format!("  step {}: operands {step:?}, {}->{}\n", k + 1, taken.iter().map(text).collect::<Vec<_>>().join(","), text(&kept));
        terms.push(kept);
    }
    let inputs: Vec<String> = spec.inputs.iter().map(|t| t.iter().collect()).collect();
    let report = format!(
        "  Complete contraction:  {}->{}\n         Naive scaling:  {}\n     Optimized scaling:  {scaling}\n      \
         Naive FLOP count:  {naive}\n  Optimized FLOP count:  {cost}\n{lines}",
        inputs.join(","),
        spec.output.iter().collect::<String>(),
        all.len(),
    );
    Ok((path, report))
}

/// Sums away the indices of `(x, t)` that are neither in `out` nor in any of `rest`.
fn sum_unneeded(op: &str, (x, t): (Array, Vec<char>), out: &[char], rest: &[Vec<char>]) -> Result<(Array, Vec<char>)> {
    let keep = |c: &char| out.contains(c) || rest.iter().any(|r| r.contains(c));
    if t.iter().all(keep) {
        return Ok((x, t));
    }
    let kept: Vec<char> = t.iter().copied().filter(keep).collect();
    let gone: Vec<usize> = (0..t.len()).filter(|&i| !keep(&t[i])).collect();
    let ones = super::creation::ones(&gone.iter().map(|&i| x.shape()[i]).collect::<Vec<_>>(), x.dtype())?;
    let summed = super::linalg::contract(op, &x, &ones, &gone, &(0..gone.len()).collect::<Vec<_>>())?;
    Ok((summed, kept))
}

/// Contracts two labelled operands: shared indices still needed become batch axes, other shared
/// indices are summed by a batched matmul.
fn contract_pair(op: &str, (a, ta): (Array, Vec<char>), (b, tb): (Array, Vec<char>), out: &[char], rest: &[Vec<char>]) -> Result<(Array, Vec<char>)> {
    let needed = |c: &char| out.contains(c) || rest.iter().any(|r| r.contains(c));
    let batch: Vec<char> = ta.iter().copied().filter(|c| tb.contains(c) && needed(c)).collect();
    let summed: Vec<char> = ta.iter().copied().filter(|c| tb.contains(c) && !needed(c)).collect();
    let only_a: Vec<char> = ta.iter().copied().filter(|c| !tb.contains(c)).collect();
    let only_b: Vec<char> = tb.iter().copied().filter(|c| !ta.contains(c)).collect();
    let pos = |t: &[char], cs: &[char]| -> Vec<i64> { cs.iter().map(|c| t.iter().position(|d| d == c).unwrap() as i64).collect() };
    let size = |t: &[char], x: &Array, cs: &[char]| -> usize { cs.iter().map(|c| x.shape()[t.iter().position(|d| d == c).unwrap()]).product() };
    let (nb, m, k, n) = (size(&ta, &a, &batch), size(&ta, &a, &only_a), size(&ta, &a, &summed), size(&tb, &b, &only_b));
    let pa = [pos(&ta, &batch), pos(&ta, &only_a), pos(&ta, &summed)].concat();
    let pb = [pos(&tb, &batch), pos(&tb, &summed), pos(&tb, &only_b)].concat();
    let a3 = super::shape::reshape_to(&super::shape::transpose(&a, Some(&pa))?, [nb, m, k][..].into())?;
    let b3 = super::shape::reshape_to(&super::shape::transpose(&b, Some(&pb))?, [nb, k, n][..].into())?;
    let prod = super::linalg::matmul(&a3, &b3).map_err(|e| Error::new(op, e.kind, e.message))?;
    let labels: Vec<char> = [batch.clone(), only_a.clone(), only_b.clone()].concat();
    let shape: crate::shape::Shape = batch
        .iter()
        .chain(&only_a)
        .map(|c| a.shape()[ta.iter().position(|d| d == c).unwrap()])
        .chain(only_b.iter().map(|c| b.shape()[tb.iter().position(|d| d == c).unwrap()]))
        .collect();
    Ok((super::shape::reshape_to(&prod, shape)?, labels))
}
