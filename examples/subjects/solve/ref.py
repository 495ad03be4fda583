"""Reference of the host-launched ``solve`` example: ``y = 2 x`` over ``n`` float32 elements.

The standalone contract (perfledger.kernels.subjects.solve): ``reference(**kwargs)`` gets the inputs
(float64 copies, CuPy arrays) and the dims by name and returns the outputs; ``ARGS`` declares
``solve``'s parameters in order (buffers with their shapes in dims, scalars from the dims, the
stream); ``bytes_per_call`` lets the harness check bandwidth plausibility.
"""

ARGS = {
    "args": [
        ["x", "in", "float32*", ["n"]],
        ["y", "out", "float32*", ["n"]],
        ["n", "int"],
        ["stream", "stream"],
    ]
}


def reference(x, **dims):
    """``{"y": 2 x}``."""
    return {"y": 2.0 * x}


def bytes_per_call(n):
    """One read and one write of ``n`` float32."""
    return 8 * n
