"""kiln.nn: modules, layers, activations, losses and initialisers, as ``mlx.nn``
(``import kiln.nn as nn``); the sharded layers for ``mx.distributed`` groups are in
``kiln.nn.distributed`` (with ``shard_linear`` and ``shard_inplace``)."""

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
