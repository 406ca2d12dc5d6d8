"""kiln.nn: modules, layers, losses and initialisers, as ``mlx.nn`` (``import kiln.nn as nn``)."""

from kiln.nn import init, losses  # noqa: F401
from kiln.nn.conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d  # noqa: F401
from kiln.nn.layers import (  # noqa: F401
    GELU,
    Dropout,
    Embedding,
    LayerNorm,
    Linear,
    MultiHeadAttention,
    ReLU,
    RMSNorm,
    Sequential,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
    gelu,
    gelu_approx,
    gelu_fast_approx,
    relu,
    sigmoid,
    silu,
    softmax,
    tanh,
)
from kiln.nn.module import Module, value_and_grad  # noqa: F401
