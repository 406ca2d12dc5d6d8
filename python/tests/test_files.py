"""Loading and saving through paths and open files, and hostile files: thousands of mutated
``.npy``, ``.npz`` and ``.safetensors`` files (a byte-level mutator over valid ones) must load or
raise a ValueError naming the file, never crash, hang or raise anything else."""

import io
import os
import random
import subprocess
import sys

import numpy as np
import pytest

import kiln.core as mx


def test_importing_kiln_leaves_numpy_to_the_functions_that_need_it(tmp_path):
    # numpy's import starts its BLAS threads, which spin beside kiln's: kiln imports it on use.
    code = (
        "import sys, kiln.core as mx, kiln.nn, kiln.optimizers\n"
        "before = 'numpy' in sys.modules\n"
        "info = (mx.finfo(mx.float16).eps, mx.iinfo(mx.uint8).max)\n"
        f"mx.save({str(tmp_path / 'a.npy')!r}, mx.arange(3))\n"
        "print(before, 'numpy' in sys.modules, info)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().split(maxsplit=2) == ["False", "True", f"({float(np.finfo(np.float16).eps)}, 255)"]
    assert np.array_equal(np.load(tmp_path / "a.npy"), np.arange(3))


def test_load_from_paths_open_files_and_streams(tmp_path):
    a = np.arange(6, dtype=np.int16).reshape(2, 3)
    np.save(tmp_path / "a.npy", a)
    with open(tmp_path / "a.npy", "rb") as f:
        assert np.array_equal(np.array(mx.load(f)), a)
    assert np.array_equal(np.array(mx.load(tmp_path / "a.npy")), a)  # a pathlib.Path
    np.savez_compressed(tmp_path / "z.npz", x=a, y=np.array([1.5], np.float64))
    z = mx.load(io.BytesIO((tmp_path / "z.npz").read_bytes()), format="npz")
    assert sorted(z) == ["x", "y"] and z["y"].dtype == mx.float64 and np.array_equal(np.array(z["x"]), a)
    buf = io.BytesIO()
    mx.save_safetensors(buf, {"w": mx.array([1.0, -2.0], dtype=mx.bfloat16)}, metadata={"k": "v"})
    buf.seek(0)
    s, meta = mx.load(buf, format="safetensors", return_metadata=True)
    assert s["w"].dtype == mx.bfloat16 and s["w"].tolist() == [1.0, -2.0] and meta == {"k": "v"}


def test_bad_load_calls_are_value_errors_naming_the_problem(tmp_path):
    with pytest.raises(ValueError, match="cannot read .*missing.npy"):
        mx.load(str(tmp_path / "missing.npy"))
    with pytest.raises(ValueError, match="unsupported format 'txt'"):
        mx.load(str(tmp_path / "a.txt"))
    with pytest.raises(ValueError, match="cannot infer the file format"):
        mx.load(io.BytesIO(b"x"))
    with pytest.raises(ValueError, match="metadata is only available for safetensors"):
        mx.load(str(tmp_path / "a.npy"), return_metadata=True)
    (tmp_path / "t.npy").write_text("not numpy")
    with open(tmp_path / "t.npy") as f, pytest.raises(ValueError, match="binary mode"):
        mx.load(f)
    with pytest.raises(ValueError, match="t.npy.*not a .npy file"):
        mx.load(str(tmp_path / "t.npy"))
    with pytest.raises(ValueError, match="expected a path"):
        mx.load(3)
    with pytest.raises(TypeError, match="expected str names and arrays"):
        mx.save_safetensors(str(tmp_path / "s"), {"w": np.zeros(2)})


_SPECIAL = b"\x00\xff9-,()[]{}\"':.\\ \nTFe"
_NUMBERS = [b"0", b"1", b"-1", b"4294967296", b"18446744073709551615", b"99999999999999999999", b"1e9", b"3.5"]


def _mutate(rng: random.Random, data: bytes) -> bytes:
    """One to four mutations: bit flips, meaningful bytes, truncation, inserted or repeated runs,
    numbers replaced by huge or negative ones, and the length fields at the start rewritten."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(max(len(out), 1))
        kind = rng.randrange(7)
        if kind == 0 and out:
            out[at] ^= 1 << rng.randrange(8)
        elif kind == 1 and out:
            out[at] = rng.choice(_SPECIAL)
        elif kind == 2:
            del out[at:]
        elif kind == 3:
            out[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif kind == 4:
            out[at:at] = out[at : at + rng.randint(1, 64)]
        elif kind == 5:
            digits = [i for i in range(min(len(out), 400)) if chr(out[i]).isdigit()]
            if digits:
                start = end = rng.choice(digits)
                while end < len(out) and chr(out[end]).isdigit():
                    end += 1
                out[start:end] = rng.choice(_NUMBERS)
        elif len(out) >= 12:
            out[rng.randrange(12)] = rng.choice([0, 1, 0x7F, 0x80, 0xFF])
    return bytes(out)


def _seed_files(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(12, dtype=np.float32).reshape(3, 4))
    np.save(tmp_path / "b.npy", np.asfortranarray(np.arange(6, dtype=">i4").reshape(2, 3)))
    np.savez(tmp_path / "c.npz", x=np.arange(5, dtype=np.uint8), y=np.ones((2, 2), np.float64))
    np.savez_compressed(tmp_path / "d.npz", z=np.array([True, False]))
    mx.save_safetensors(
        str(tmp_path / "e.safetensors"), {"w": mx.ones((2, 3)), "b": mx.array([1, 2], dtype=mx.int64)}, metadata={"format": "mlx"}
    )
    mx.save_gguf(str(tmp_path / "f.gguf"), {"w": mx.ones((2, 3)), "i": mx.array([1, 2], dtype=mx.int16)}, {"tags": ["a", "b"], "n": mx.array([3, 4])})
    return {fmt: [(tmp_path / n).read_bytes() for n in names] for fmt, names in
            {"npy": ["a.npy", "b.npy"], "npz": ["c.npz", "d.npz"], "safetensors": ["e.safetensors"], "gguf": ["f.gguf"]}.items()}


@pytest.mark.parametrize("fmt", ["npy", "npz", "safetensors", "gguf"])
def test_mutated_files_load_or_raise_value_error(tmp_path, fmt):
    cases = int(os.environ.get("KILN_FUZZ_FILES", "3000"))
    seeds = _seed_files(tmp_path)[fmt]
    rng = random.Random(fmt + os.environ.get("KILN_FUZZ_SEED", ""))
    loaded = errors = 0
    for case in range(cases):
        data = _mutate(rng, seeds[case % len(seeds)])
        try:
            out = mx.load(io.BytesIO(data), format=fmt)
        except ValueError:
            errors += 1
            continue
        except Exception as e:  # anything else is a finding: report the bytes that caused it
            pytest.fail(f"case {case}: {type(e).__name__}: {e}\nbytes: {data[:300]!r}")
        arrays = [out] if isinstance(out, mx.array) else list(out.values())
        for a in arrays:
            assert a.nbytes <= len(data), f"case {case}: an array of {a.nbytes} bytes from {len(data)} bytes"
            np.array(a)  # the data is really there
        loaded += 1
    # The mutator reaches both outcomes, or it tests nothing.
    assert loaded * 100 > cases and errors * 2 > cases, (loaded, errors)


def test_load_honours_the_stream_argument(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(3, dtype=np.float32))
    s = mx.new_stream(mx.cpu)
    a = mx.load(str(tmp_path / "a.npy"), stream=s)
    assert a.tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(TypeError):
        mx.load(str(tmp_path / "a.npy"), stream="not a stream")


def test_gguf_round_trips_tensors_and_metadata(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {
        "w": mx.array(rng.standard_normal((3, 4)).astype(np.float32)),
        "h": mx.array(rng.standard_normal((5,)).astype(np.float16)),
        "b": mx.array([1.5, -2.0]).astype(mx.bfloat16),
        "i": mx.arange(24, dtype=mx.int32).reshape(2, 3, 4),
    }
    meta = {"name": "tiny", "tags": ["a", "bc"], "n": mx.array(3, mx.uint64), "v": mx.array([1.5, 2.5])}
    path = tmp_path / "m.gguf"
    mx.save_gguf(path, arrays, meta)
    loaded, loaded_meta = mx.load(str(path), return_metadata=True)
    assert list(loaded) == list(arrays)
    for k, a in arrays.items():
        assert loaded[k].dtype == a.dtype and loaded[k].shape == a.shape
        np.testing.assert_array_equal(np.array(loaded[k].astype(mx.float32)), np.array(a.astype(mx.float32)))
    assert loaded_meta["name"] == "tiny" and loaded_meta["tags"] == ["a", "bc"]
    assert loaded_meta["n"].dtype == mx.uint64 and loaded_meta["n"].item() == 3
    assert loaded_meta["v"].tolist() == [1.5, 2.5]
    with open(path, "rb") as f:  # open files work too
        assert mx.load(f, format="gguf")["i"].tolist() == arrays["i"].tolist()
    with pytest.raises(ValueError, match="uint8"):
        mx.save_gguf(tmp_path / "bad", {"u": mx.array([1], mx.uint8)})
    with pytest.raises(ValueError, match="float16"):
        mx.save_gguf(tmp_path / "bad", arrays, {"m": mx.array(1.0, mx.float16)})
    with pytest.raises(TypeError, match="metadata"):
        mx.save_gguf(tmp_path / "bad", arrays, {"m": 3})
    (tmp_path / "cut.gguf").write_bytes(path.read_bytes()[:50])
    with pytest.raises(ValueError, match="cut.gguf"):
        mx.load(str(tmp_path / "cut.gguf"))


def test_mutated_npy_paths_raise_at_load_or_at_evaluation(tmp_path):
    """A `.npy` path loads lazily: a bad header is a ValueError at load, data cut short (or more
    than memory holds) a RuntimeError when the array is evaluated; nothing else escapes."""
    cases = int(os.environ.get("KILN_FUZZ_FILES", "3000")) // 10
    seeds = _seed_files(tmp_path)["npy"]
    rng = random.Random("npy paths" + os.environ.get("KILN_FUZZ_SEED", ""))
    outcomes = {"loaded": 0, "bad header": 0, "short data": 0}
    path = tmp_path / "mutated.npy"
    for case in range(cases):
        data = _mutate(rng, seeds[case % len(seeds)])
        path.write_bytes(data)
        try:
            out = mx.load(str(path))
        except ValueError:
            outcomes["bad header"] += 1
            continue
        try:
            np.array(out)
        except RuntimeError as e:
            # Data cut short names the file; a header claiming more than the machine's memory
            # is refused when its array is allocated.
            assert ("needs" in str(e) and "mutated.npy" in str(e)) or "out of host memory" in str(e), e
            outcomes["short data"] += 1
            continue
        assert out.nbytes <= len(data), f"case {case}: an array of {out.nbytes} bytes from {len(data)} bytes"
        outcomes["loaded"] += 1
    assert all(n > 0 for n in outcomes.values()), outcomes


def test_npy_paths_load_lazily_into_memory_a_consumer_takes_over(tmp_path):
    path = str(tmp_path / "x.npy")
    np.save(path, np.arange(4096, dtype=np.float32))
    y = mx.load(path)
    np.save(path, -np.arange(4096, dtype=np.float32))  # the data is read at evaluation
    np.testing.assert_array_equal(np.array(y), -np.arange(4096, dtype=np.float32))
    # On the CPU the product writes into the loaded data's memory (a GPU would copy it over).
    scale = mx.array(2.0)
    mx.eval(scale)
    mx.reset_peak_memory()
    mx.eval(mx.load(path, stream=mx.cpu))
    alone = mx.get_peak_memory()
    mx.reset_peak_memory()
    z = mx.multiply(mx.load(path, stream=mx.cpu), scale, stream=mx.cpu)
    mx.eval(z)
    assert mx.get_peak_memory() == alone
    np.testing.assert_array_equal(np.array(z), -2 * np.arange(4096, dtype=np.float32))
