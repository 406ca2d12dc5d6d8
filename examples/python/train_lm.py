"""Trains a small character-level transformer language model on a text file with kiln, the
training step compiled (model and optimizer state captured with ``inputs=``/``outputs=``), and
prints the loss and tokens/s as it goes.

    .venv/bin/python examples/python/train_lm.py                 # the repository's README.md
    .venv/bin/python examples/python/train_lm.py --text FILE --steps 500 --dims 128

The model: token embeddings plus sinusoidal positions, a stack of pre-norm transformer encoder
layers under a causal mask, and a linear head onto the characters; AdamW with a warmup then a
cosine decay of the learning rate.
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np

import kiln.core as mx
import kiln.nn as nn
import kiln.optimizers as optim
from kiln.utils import tree_flatten

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class CharTransformer(nn.Module):
    """Embedding, positions, ``layers`` causal encoder layers, a final norm inside the stack, and
    a linear head."""

    def __init__(self, vocab: int, dims: int, heads: int, layers: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dims)
        self.positions = nn.SinusoidalPositionalEncoding(dims)
        self.encoder = nn.TransformerEncoder(layers, dims, heads, mlp_dims=4 * dims)
        self.head = nn.Linear(dims, vocab)

    def __call__(self, tokens):
        length = tokens.shape[1]
        x = self.embedding(tokens) + self.positions(mx.arange(length))
        mask = nn.MultiHeadAttention.create_additive_causal_mask(length)
        return self.head(self.encoder(x, mask))


def batches(data: np.ndarray, batch: int, context: int, rng: np.random.Generator):
    """Endless (inputs, next characters) pairs of random windows of ``data``."""
    while True:
        starts = rng.integers(0, len(data) - context - 1, batch)
        window = np.stack([data[s : s + context + 1] for s in starts])
        yield mx.array(window[:, :-1]), mx.array(window[:, 1:])


def train(text: str, steps: int = 200, batch: int = 16, context: int = 64, dims: int = 64, heads: int = 4, layers: int = 2,
          learning_rate: float = 3e-3, seed: int = 0, report_every: int = 20, log=print) -> list:
    """Trains on ``text``; returns the loss of every step."""
    chars = sorted(set(text))
    lookup = {c: i for i, c in enumerate(chars)}
    data = np.array([lookup[c] for c in text], dtype=np.int32)
    if len(data) < context + 2:
        raise ValueError(f"train: the text has {len(data)} characters, fewer than the context ({context}) needs")
    mx.random.seed(seed)
    model = CharTransformer(len(chars), dims, heads, layers)
    warmup = max(1, steps // 10)
    schedule = optim.join_schedules(
        [optim.linear_schedule(learning_rate / 10, learning_rate, warmup), optim.cosine_decay(learning_rate, max(1, steps - warmup), learning_rate / 10)],
        [warmup],
    )
    optimizer = optim.AdamW(learning_rate=schedule, weight_decay=0.01)

    def loss_fn(inputs, targets):
        logits = model(inputs)
        return nn.losses.cross_entropy(logits, targets, reduction="mean")

    loss_and_grad = nn.value_and_grad(model, loss_fn)
    state = [model.state, optimizer.state]

    def train_step(inputs, targets):
        loss, grads = loss_and_grad(inputs, targets)
        grads, _ = optim.clip_grad_norm(grads, 1.0)
        optimizer.update(model, grads)
        return loss

    step = mx.compile(train_step, inputs=state, outputs=state)
    log(f"{len(text)} characters, {len(chars)} distinct; model of {sum(v.size for _, v in tree_flatten(model.parameters()))} parameters")
    losses = []
    stream = batches(data, batch, context, np.random.default_rng(seed))
    started, tokens = time.perf_counter(), 0
    for i in range(1, steps + 1):
        inputs, targets = next(stream)
        loss = step(inputs, targets)
        mx.eval(loss, state)
        losses.append(loss.item())
        tokens += batch * context
        if i % report_every == 0 or i == steps:
            elapsed = time.perf_counter() - started
            log(f"step {i:5d}  loss {np.mean(losses[-report_every:]):.3f}  {tokens / elapsed:,.0f} tokens/s")
    return losses


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--text", default=os.path.join(REPO, "README.md"), help="the text file to learn (default: the README)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--dims", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-3)
    a = p.parse_args()
    with open(a.text, encoding="utf-8") as f:
        text = f.read()
    losses = train(text, a.steps, a.batch, a.context, a.dims, 4, a.layers, a.lr)
    first, last = np.mean(losses[:10]), np.mean(losses[-10:])
    print(f"loss {first:.3f} -> {last:.3f} (uniform guess: {math.log(len(set(text))):.3f})")


if __name__ == "__main__":
    main()
