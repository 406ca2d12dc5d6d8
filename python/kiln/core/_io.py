"""Saving and loading arrays, as mlx's: ``save`` (.npy), ``savez``/``savez_compressed`` (.npz),
``save_safetensors`` and ``load`` (all three by extension). numpy does the .npy/.npz formats;
safetensors (a little-endian JSON header followed by the raw data) is written here. bfloat16,
which numpy lacks, travels through float32 (exact both ways) and is stored as BF16 in
safetensors."""

from __future__ import annotations

import json
import struct
from typing import Dict, Optional

import numpy as np

from kiln import _core
from kiln._core import array, bfloat16, float32

_ST_DTYPES = {
    "BOOL": np.bool_,
    "U8": np.uint8,
    "U16": np.uint16,
    "U32": np.uint32,
    "U64": np.uint64,
    "I8": np.int8,
    "I16": np.int16,
    "I32": np.int32,
    "I64": np.int64,
    "F16": np.float16,
    "F32": np.float32,
    "F64": np.float64,
}
_ST_NAMES = {np.dtype(v): k for k, v in _ST_DTYPES.items()}


def _numpy(a: array, what: str) -> np.ndarray:
    if not isinstance(a, array):
        raise TypeError(f"{what}: expected an array, got {type(a).__name__}")
    if a.dtype == bfloat16:
        raise ValueError(f"{what}: bfloat16 has no numpy dtype; save it with save_safetensors or cast with astype")
    return np.asarray(a)


def save(file: str, arr: array) -> None:
    """Saves one array as ``.npy`` (the extension is added when missing)."""
    np.save(file, _numpy(arr, "save"))


def savez(file: str, *args: array, **kwargs: array) -> None:
    """Saves arrays to an ``.npz`` archive (positional ones as ``arr_0``, ...)."""
    np.savez(file, *(_numpy(a, "savez") for a in args), **{k: _numpy(v, "savez") for k, v in kwargs.items()})


def savez_compressed(file: str, *args: array, **kwargs: array) -> None:
    """Like ``savez``, compressed."""
    np.savez_compressed(
        file, *(_numpy(a, "savez_compressed") for a in args), **{k: _numpy(v, "savez_compressed") for k, v in kwargs.items()}
    )


def save_safetensors(file: str, arrays: Dict[str, array], metadata: Optional[Dict[str, str]] = None) -> None:
    """Saves a dict of arrays in the safetensors format."""
    if not file.endswith(".safetensors"):
        file += ".safetensors"
    header: dict = {"__metadata__": dict(metadata)} if metadata else {}
    blobs, offset = [], 0
    for name, a in arrays.items():
        if not isinstance(a, array):
            raise TypeError(f"save_safetensors: {name!r} is a {type(a).__name__}, not an array")
        if a.dtype == bfloat16:
            bits = np.ascontiguousarray(np.asarray(a.astype(float32))).view(np.uint32)
            data, dtype = (bits >> 16).astype("<u2").tobytes(), "BF16"
        else:
            n = np.ascontiguousarray(np.asarray(a))
            data, dtype = n.astype(n.dtype.newbyteorder("<")).tobytes(), _ST_NAMES[n.dtype]
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(file, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)


def _load_safetensors(file: str):
    with open(file, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"load: {file} is too short to be a safetensors file")
    (n,) = struct.unpack("<Q", raw[:8])
    try:
        header = json.loads(raw[8 : 8 + n])
    except ValueError as e:
        raise ValueError(f"load: {file} has a malformed safetensors header ({e})") from None
    metadata = header.pop("__metadata__", {})
    body = memoryview(raw)[8 + n :]
    out = {}
    for name, info in header.items():
        start, end = info["data_offsets"]
        chunk = body[start:end]
        if info["dtype"] == "BF16":
            bits = np.frombuffer(chunk, dtype="<u2").astype(np.uint32) << 16
            out[name] = array(bits.view(np.float32).reshape(info["shape"])).astype(bfloat16)
        elif info["dtype"] in _ST_DTYPES:
            data = np.frombuffer(chunk, dtype=np.dtype(_ST_DTYPES[info["dtype"]]).newbyteorder("<"))
            out[name] = array(data.reshape(info["shape"]), dtype=_kiln_dtype(data.dtype))
        else:
            raise ValueError(f"load: {file} holds {name!r} of dtype {info['dtype']}, which kiln does not have")
    return out, metadata


def _kiln_dtype(d: np.dtype):
    name = {np.dtype(np.bool_): "bool_"}.get(np.dtype(d), np.dtype(d).name)
    return getattr(_core, name)


def load(file: str, format: Optional[str] = None, return_metadata: bool = False):
    """Loads ``.npy`` (an array), ``.npz`` or ``.safetensors`` (a dict of arrays). Arrays keep
    their dtype (float64 included)."""
    fmt = format or file.rsplit(".", 1)[-1]
    if fmt == "safetensors":
        arrays, metadata = _load_safetensors(file)
        return (arrays, metadata) if return_metadata else arrays
    if return_metadata:
        raise ValueError("load: metadata is only available for safetensors files")
    if fmt == "npy":
        n = np.load(file, allow_pickle=False)
        return array(n, dtype=_kiln_dtype(n.dtype))
    if fmt == "npz":
        with np.load(file, allow_pickle=False) as z:
            return {k: array(z[k], dtype=_kiln_dtype(z[k].dtype)) for k in z.files}
    raise ValueError(f"load: unsupported format {fmt!r}; use .npy, .npz or .safetensors")
