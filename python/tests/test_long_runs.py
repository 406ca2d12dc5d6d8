"""Memory stays flat over long runs from Python: 10,000 cycles of creating, calling and dropping a
compiled function, and 10,000 steps of a compiled training step (a model and an optimizer as
compile's state). The bytes arrays hold come back to where they were after a warm-up, and the
process's resident memory grows by less than a small bound."""

import gc
import os
from functools import partial


import kiln.core as mx
import kiln.nn as nn
import kiln.optimizers as optim

CYCLES = int(os.environ.get("KILN_MEMORY_CYCLES", "10000"))
WARM_UP = 500
RSS_GROWTH_LIMIT = 16 << 20


def _resident_bytes():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096
    except OSError:
        return None


def _flat(what, cycle):
    # Native kernels build in the background and load at a later call (on a machine whose kernel
    # cache is empty, during the measured cycles, unless waited for): let them all load first.
    for i in range(WARM_UP):
        cycle(i)
    mx.wait_for_native_builds()
    for i in range(WARM_UP):
        cycle(i)
    gc.collect()
    mx.clear_cache()
    active, rss = mx.get_active_memory(), _resident_bytes()
    for i in range(WARM_UP, CYCLES):
        cycle(i)
    gc.collect()
    mx.clear_cache()
    active_end, rss_end = mx.get_active_memory(), _resident_bytes()
    assert active_end == active, f"{what}: arrays hold {active_end - active} more bytes after {CYCLES} cycles"
    if rss is not None:
        assert rss_end <= rss + RSS_GROWTH_LIMIT, f"{what}: resident memory grew by {(rss_end - rss) >> 10} KiB"


def test_creating_calling_and_dropping_compiled_functions_holds_memory_flat():
    x = mx.arange(64, dtype=mx.float32).reshape(8, 8) / 64
    mx.eval(x)

    def cycle(i):
        k = i % 7
        f = mx.compile(lambda a: mx.tanh(a) * k + a.sum())
        mx.eval(f(x))

    _flat("compile, call and drop", cycle)


def test_compiled_training_step_holds_memory_flat():
    mx.random.seed(0)
    model = nn.Linear(16, 1)
    opt = optim.SGD(learning_rate=0.1)
    x = mx.random.normal((32, 16))
    y = (x.sum(axis=1, keepdims=True) > 0).astype(mx.float32)
    state = [model.state, opt.state]

    def loss_fn(m):
        return nn.losses.binary_cross_entropy(m(x), y, with_logits=True)

    @partial(mx.compile, inputs=state, outputs=state)
    def step():
        loss, grads = nn.value_and_grad(model, loss_fn)(model)
        opt.update(model, grads)
        return loss

    losses = []

    def cycle(i):
        loss = step()
        mx.eval(loss)
        if i % 2000 == 0:
            losses.append(loss.item())

    _flat("compiled training step", cycle)
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
