"""kiln.nn: modules, layers, activations, losses and initialisers, as ``mlx.nn``
(``import kiln.nn as nn``); the sharded layers for ``mx.distributed`` groups are in
``kiln.nn.distributed`` (with ``shard_linear`` and ``shard_inplace``). mlx's layer modules
(``mlx.nn.layers.distributed``, ``.base``, ``.linear``, ...) import under the same names from
``kiln.nn.layers``."""

import sys

from kiln.nn import activations, init, losses  # noqa: F401
from kiln.nn.activations import (  # noqa: F401
    CELU,
    ELU,
    GELU,
    GLU,
    SELU,
    HardShrink,
    Hardswish,
    HardTanh,
    LeakyReLU,
    LogSigmoid,
    LogSoftmax,
    Mish,
    PReLU,
    ReLU,
    ReLU2,
    ReLU6,
    Sigmoid,
    SiLU,
    Softmax,
    Softmin,
    Softplus,
    Softshrink,
    Softsign,
    Step,
    Tanh,
    celu,
    elu,
    gelu,
    gelu_approx,
    gelu_fast_approx,
    glu,
    hard_shrink,
    hard_tanh,
    hardswish,
    leaky_relu,
    log_sigmoid,
    log_softmax,
    mish,
    prelu,
    relu,
    relu2,
    relu6,
    selu,
    sigmoid,
    silu,
    softmax,
    softmin,
    softplus,
    softshrink,
    softsign,
    step,
    tanh,
)
from kiln.nn.conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d  # noqa: F401
from kiln.nn.layers import (  # noqa: F401
    Bilinear,
    Dropout,
    Dropout2d,
    Dropout3d,
    Embedding,
    Identity,
    Linear,
    MultiHeadAttention,
    Sequential,
)
from kiln.nn.pooling import AvgPool1d, AvgPool2d, AvgPool3d, MaxPool1d, MaxPool2d, MaxPool3d  # noqa: F401
from kiln.nn.transformer import (  # noqa: F401
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from kiln.nn.quantized import QQLinear, QuantizedEmbedding, QuantizedLinear, quantize  # noqa: F401
from kiln.nn.distributed import (  # noqa: F401
    AllToShardedLinear,
    FullyShardedModule,
    QuantizedAllToShardedLinear,
    QuantizedShardedToAllLinear,
    ShardedToAllLinear,
    fully_shard,
)
from kiln.nn.upsample import Upsample  # noqa: F401
from kiln.nn.recurrent import GRU, LSTM, RNN  # noqa: F401
from kiln.nn.positional import ALiBi, RoPE, SinusoidalPositionalEncoding  # noqa: F401
from kiln.nn.normalization import BatchNorm, GroupNorm, InstanceNorm, LayerNorm, RMSNorm  # noqa: F401
from kiln.nn.module import Module, value_and_grad  # noqa: F401
from kiln.nn.utils import average_gradients  # noqa: F401

from kiln.nn import conv, distributed, layers, module, normalization, pooling, positional  # noqa: E402
from kiln.nn import quantized, recurrent, transformer, upsample  # noqa: E402

# mlx keeps its layers in a package whose modules code imports directly (mlx-lm: ``from
# mlx.nn.layers.distributed import shard_linear``); each name resolves to the kiln module that
# holds the same classes.
for _name, _module in {
    "activations": activations,
    "base": module,
    "containers": layers,
    "convolution": conv,
    "convolution_transpose": conv,
    "distributed": distributed,
    "dropout": layers,
    "embedding": layers,
    "linear": layers,
    "normalization": normalization,
    "pooling": pooling,
    "positional_encoding": positional,
    "quantized": quantized,
    "recurrent": recurrent,
    "transformer": transformer,
    "upsample": upsample,
}.items():
    sys.modules[f"{__name__}.layers.{_name}"] = _module
    setattr(layers, _name, _module)
del _name, _module
