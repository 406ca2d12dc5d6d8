"""numpy, imported on first use. Importing numpy starts its BLAS thread pool, whose threads spin
beside kiln's own for a while (on a 2-core machine the first compiled calls ran at half speed), so
``import kiln.core`` leaves numpy to the functions that need it."""


def numpy():
    """The numpy module (imported on the first call)."""
    import numpy

    return numpy
