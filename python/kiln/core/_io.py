"""Saving and loading arrays, as mlx's: ``save`` (.npy), ``savez``/``savez_compressed`` (.npz),
``save_safetensors``, ``save_gguf`` and ``load`` (all four by extension). numpy writes the .npy/.npz formats;
kiln's own writer makes safetensors (BF16 included, which numpy lacks). Loading hands the file's
bytes to kiln's own parsers (``kiln::io``), which check every length, shape and offset a file
claims before reading it."""

from __future__ import annotations

import io
import os
import zipfile
from typing import Dict, Optional

from kiln import _core
from kiln.core._numpy import numpy as _np
from kiln._core import array, bfloat16
from kiln.core._streams import on_stream


def _numpy(a: array, what: str):
    if not isinstance(a, array):
        raise TypeError(f"{what}: expected an array, got {type(a).__name__}")
    if a.dtype == bfloat16:
        raise ValueError(f"{what}: bfloat16 has no numpy dtype; save it with save_safetensors or cast with astype")
    return _np().asarray(a)


def save(file: str, arr: array) -> None:
    """Saves one array as ``.npy`` (the extension is added when missing)."""
    _np().save(file, _numpy(arr, "save"))


def savez(file: str, *args: array, **kwargs: array) -> None:
    """Saves arrays to an ``.npz`` archive (positional ones as ``arr_0``, ...)."""
    _np().savez(file, *(_numpy(a, "savez") for a in args), **{k: _numpy(v, "savez") for k, v in kwargs.items()})


def savez_compressed(file: str, *args: array, **kwargs: array) -> None:
    """Like ``savez``, compressed."""
    _np().savez_compressed(
        file, *(_numpy(a, "savez_compressed") for a in args), **{k: _numpy(v, "savez_compressed") for k, v in kwargs.items()}
    )


def _check_named(what: str, arrays) -> None:
    if not isinstance(arrays, dict):
        raise TypeError(f"{what}: arrays must be a dict of name to array, got {type(arrays).__name__}")
    for name, a in arrays.items():
        if not isinstance(name, str) or not isinstance(a, array):
            raise TypeError(f"{what}: {name!r} maps to a {type(a).__name__}; expected str names and arrays")


def _write(what: str, file, extension: str, encoded) -> None:
    """Writes ``encoded(target)`` (bytes) to a path (``extension`` added when missing) or to an
    open binary file."""
    if isinstance(file, (str, os.PathLike)):
        path = os.fspath(file)
        path += "" if path.endswith(extension) else extension
        data = encoded(path)
        with open(path, "wb") as f:
            f.write(data)
    elif hasattr(file, "write"):
        file.write(encoded(str(getattr(file, "name", "<stream>"))))
    else:
        raise TypeError(f"{what}: expected a path or a file opened for binary writing, got {type(file).__name__}")


def save_safetensors(file, arrays: Dict[str, array], metadata: Optional[Dict[str, str]] = None) -> None:
    """Saves a dict of arrays, and string metadata, in the safetensors format, to a path (the
    extension is added when missing) or an open binary file."""
    _check_named("save_safetensors", arrays)
    meta = dict(metadata or {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise TypeError("save_safetensors: metadata must map strings to strings")
    _write("save_safetensors", file, ".safetensors", lambda t: _core._safetensors_bytes(list(arrays.items()), list(meta.items()), t))


def save_gguf(file, arrays: Dict[str, array], metadata: Optional[Dict[str, object]] = None) -> None:
    """Saves a dict of arrays in the GGUF format (float32/16/64, bfloat16 and signed integers),
    with metadata mapping names to strings, lists of strings or arrays (0-d or 1-d, integer,
    float32/64 or bool), to a path (``.gguf`` added when missing) or an open binary file."""
    _check_named("save_gguf", arrays)
    meta = dict(metadata or {})
    if not all(isinstance(k, str) for k in meta):
        raise TypeError("save_gguf: metadata keys must be strings")
    _write("save_gguf", file, ".gguf", lambda t: _core._gguf_bytes(list(arrays.items()), list(meta.items()), t))


def _is_path(file) -> bool:
    return isinstance(file, (str, os.PathLike))


def _read(file) -> tuple:
    """The bytes of ``file`` (a path or an open binary file) and the name errors give it."""
    if _is_path(file):
        try:
            with open(file, "rb") as f:
                return f.read(), os.fspath(file)
        except OSError as e:
            raise ValueError(f"load: cannot read {os.fspath(file)!r}: {e.strerror or e}") from None
    data = file.read()
    if not isinstance(data, bytes):
        raise ValueError("load: the file must be opened in binary mode ('rb')")
    return data, str(getattr(file, "name", "<stream>"))


def _format_of(file, fmt: Optional[str]) -> str:
    """The format to read: ``fmt``, else the file name's extension."""
    if not _is_path(file) and not all(hasattr(file, a) for a in ("readinto", "seek", "tell", "closed")):
        raise ValueError(f"load: expected a path or a file-like object opened in binary mode, got {type(file).__name__}")
    if fmt is not None:
        return fmt
    name = os.fspath(file) if _is_path(file) else getattr(file, "name", None)
    if not isinstance(name, str) or "." not in os.path.basename(name):
        raise ValueError("load: cannot infer the file format from its name; pass format='npy', 'npz', 'safetensors' or 'gguf'")
    return name.rsplit(".", 1)[-1]


def _load_npz(data: bytes, source: str) -> Dict[str, array]:
    """The arrays of an ``.npz`` archive, each member read by kiln's ``.npy`` parser. Whatever a
    damaged archive makes zipfile and its decompressors raise (BadZipFile, EOFError, zlib's and
    lzma's errors, OSError from bz2, RuntimeError for an encrypted member, ...) becomes a
    ValueError naming the file."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            members = [(m, z.read(m)) for m in z.namelist()]
    except Exception as e:  # noqa: BLE001 -- see the docstring
        raise ValueError(f"load: {source} is not a readable .npz archive ({e})") from None
    return {m[:-4] if m.endswith(".npy") else m: _core._load_npy_bytes(b, f"{source}[{m}]") for m, b in members}


def load(file, format: Optional[str] = None, return_metadata: bool = False, stream=None):
    """Loads ``.npy`` (an array), ``.npz``, ``.safetensors`` or ``.gguf`` (a dict of arrays, and
    with ``return_metadata`` the file's metadata) from a path or an open binary file, as arrays of ``stream`` (a stream or device; the default one if None).
    Arrays keep their dtype (float64 included); a malformed file is a ValueError naming it. A
    ``.npy`` path loads lazily, as in mlx: its data is read when the array is evaluated, and a file
    cut short by then makes that evaluation a RuntimeError."""
    fmt = _format_of(file, format)
    if fmt not in ("npy", "npz", "safetensors", "gguf"):
        raise ValueError(f"load: unsupported format {fmt!r}; use .npy, .npz, .safetensors or .gguf")
    if return_metadata and fmt not in ("safetensors", "gguf"):
        raise ValueError(f"load: metadata is only available for safetensors and GGUF files, not {fmt}")
    if fmt == "npy" and _is_path(file) and os.path.isfile(file):
        with on_stream(stream):  # lazily, as mlx: the header now, the data when evaluated
            return _core._load_npy_file(os.fspath(file))
    data, source = _read(file)
    with on_stream(stream):
        if fmt == "npy":
            return _core._load_npy_bytes(data, source)
        if fmt == "npz":
            return _load_npz(data, source)
        parse = _core._load_gguf_bytes if fmt == "gguf" else _core._load_safetensors_bytes
        named, metadata = parse(data, source)
    arrays = dict(named)
    return (arrays, dict(metadata)) if return_metadata else arrays
