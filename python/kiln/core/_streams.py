"""Running a composite op's whole body on its ``stream`` argument."""

import contextlib

from kiln import _core as _c


def on_stream(stream):
    """A context in which every op runs on ``stream`` (a stream or a device); with None, on the
    default one. Composites use it so that ``stream=`` reaches every op they are made of,
    indexing and ``astype`` included."""
    return _c.stream(stream) if stream is not None else contextlib.nullcontext()
