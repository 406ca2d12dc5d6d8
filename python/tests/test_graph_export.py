"""export_to_dot: the graph's DOT text names every pending op and array, to a path or a stream."""

import io

import pytest

import kiln.core as mx


def test_pending_ops_and_named_inputs_are_in_the_dot_text(tmp_path):
    x = mx.array([1.0, 2.0])
    y = mx.array([3.0, 4.0])
    z = mx.exp(x + y)
    out = io.StringIO()
    mx.export_to_dot(out, z, x=x)
    text = out.getvalue()
    assert text.startswith("digraph {") and text.rstrip().endswith("}")
    assert text.count("shape=rectangle") == 2, text
    assert 'label="add"' in text and 'label="exp"' in text
    assert '"x" -> "op ' in text, text
    path = tmp_path / "graph.dot"
    mx.export_to_dot(str(path), z, x=x)
    assert path.read_text() == text
    mx.eval(z)
    done = io.StringIO()
    mx.export_to_dot(done, z)
    assert "shape=rectangle" not in done.getvalue()


def test_several_outputs_and_trees_are_one_graph():
    a, b = mx.array(7.0), mx.array(2.0)
    q, r = mx.divmod(a, b)
    out = io.StringIO()
    mx.export_to_dot(out, [q, {"r": r}])
    assert out.getvalue().count("rank=sink") == 2, out.getvalue()


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="export_to_dot"):
        mx.export_to_dot(3, mx.array(1.0))
    with pytest.raises(TypeError, match="export_to_dot"):
        mx.export_to_dot(io.StringIO(), mx.array(1.0), "not an array")
