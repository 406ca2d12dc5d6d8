"""kiln.core.random: keys, seeding and samplers with mlx's signatures.

``state`` is the global random state as a one-element list, as in mlx: pass it to
``compile(inputs=..., outputs=...)`` so that a compiled function that draws random numbers
(``nn.Dropout``, say) gets fresh ones on every call.
"""

from kiln._core import random as _native

key = _native.key
seed = _native.seed
split = _native.split
uniform = _native.uniform
normal = _native.normal
laplace = _native.laplace
multivariate_normal = _native.multivariate_normal
truncated_normal = _native.truncated_normal
bernoulli = _native.bernoulli
randint = _native.randint
gumbel = _native.gumbel
bits = _native.bits
categorical = _native.categorical
permutation = _native.permutation


class _State(list):
    """A list view of the global random state: ``state[0]`` reads the current key and assigning
    it replaces the state (what ``compile`` does to capture it)."""

    def __len__(self):
        return 1

    def __iter__(self):
        return iter([_native._get_state()])

    def __getitem__(self, i):
        return [_native._get_state()][i]

    def __setitem__(self, i, value):
        [None][i]  # the index must be 0 or -1
        _native._set_state(value)

    def __repr__(self):
        return repr(list(self))


state = _State()

__all__ = [
    "key",
    "seed",
    "split",
    "uniform",
    "normal",
    "laplace",
    "multivariate_normal",
    "truncated_normal",
    "bernoulli",
    "randint",
    "gumbel",
    "bits",
    "categorical",
    "permutation",
    "state",
]
