"""The checks of the arguments jitbmm's Python functions hand to the C ABI, and the Problem's checked properties."""

import reprlib

# Numbers are checked here, before ctypes sees them: ctypes silently wraps integers to the C type's width (2**64 + 2
# becomes 2, -1 a pointer to the top of memory) and pads short arrays with zeros.
_INT64_MAX = 2**63 - 1
_UINTPTR_MAX = 2**64 - 1


def _shown(value):
    """value's repr, cut short (reprlib: six items of a list, 30 characters of a string), so that an error about a
    buffer of a million floats passed where an address goes stays one line."""
    return reprlib.repr(value)


def _integer(value, what, lo, hi):
    """value as a Python int in [lo, hi]; bool and float are refused (True is not a size, 2.0 not an index)."""
    if isinstance(value, (bool, float)) or not hasattr(type(value), "__index__"):
        raise TypeError(f"{what}: expected an integer in [{lo}, {hi}], got {_shown(value)} ({type(value).__name__})")
    v = value.__index__()
    if not lo <= v <= hi:
        raise ValueError(f"{what}: expected an integer in [{lo}, {hi}], got {v}")
    return v


def _items(value, count, message):
    """value as a tuple of exactly `count` items (a string is not a sequence of sizes); `message` names it."""
    # A string is not a sequence of sizes, and a set's or a mapping's order is not the caller's.
    if isinstance(value, (str, bytes, set, frozenset, dict)) or not hasattr(value, "__len__"):
        raise TypeError(message)
    try:
        items = tuple(value)
    except TypeError:
        raise TypeError(message) from None
    if len(items) != count:
        raise ValueError(message)
    return items


def _strides(value, what):
    """Exactly three non-negative integers (batch, row, col), as a tuple."""
    message = f"{what}: expected 3 non-negative integers (batch, row, col), got {_shown(value)}"
    items = _items(value, 3, message)
    for x in items:
        if isinstance(x, (bool, float)) or not hasattr(type(x), "__index__"):
            raise TypeError(message)
        if not 0 <= x.__index__() <= _INT64_MAX:
            raise ValueError(message)
    return tuple(x.__index__() for x in items)


def _pointer(value, what):
    """An address or CUstream handle: None (null) or an integer in [0, 2**64 - 1]."""
    return None if value is None else _integer(value, what, 0, _UINTPTR_MAX) or None


def _choice(value, what, choices, allow_none=False):
    if (value is None and allow_none) or (isinstance(value, str) and value in choices):
        return value
    expected = ", ".join(choices) + (" or None" if allow_none else "")
    raise ValueError(f"{what}: unsupported {_shown(value)} (expected one of {expected})")


_OPERANDS = {"a": "MK", "b": "KN", "out": "MN"}  # each operand's (rows, cols) among the sizes


def _row_major(rows, cols, names):
    """The default (contiguous) strides; a matrix too large for int64 offsets is the shape's fault, said so."""
    if rows * cols > _INT64_MAX:
        raise ValueError(f"shape.{names[0]} * shape.{names[1]} = {rows} * {cols} does not fit int64")
    return (rows * cols, cols, 1)


def _shape(value, defaulted=()):
    """(B, M, K, N): four integers in [0, 2**63 - 1]. `defaulted` names the operands ("a", "b", "out") whose
    strides are row-major: their matrices must then fit int64 offsets."""
    items = _items(value, 4, f"shape: expected 4 integers (B, M, K, N), got {_shown(value)}")
    shape = tuple(_integer(v, "shape." + name, 0, _INT64_MAX) for v, name in zip(items, "BMKN"))
    sizes = dict(zip("BMKN", shape))
    for operand in defaulted:
        rows, cols = _OPERANDS[operand]
        _row_major(sizes[rows], sizes[cols], rows + cols)
    return shape


def _flag(value, what):
    # A bool or an integer 0 or 1 (numpy's too); not a float, a fraction or an array, though some equal True.
    if isinstance(value, bool) or (type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_")):
        return bool(value)
    if not hasattr(value, "__index__") or isinstance(value, float) or value.__index__() not in (0, 1):
        raise TypeError(f"{what}: expected True or False, got {_shown(value)}")
    return bool(value.__index__())


def _checked(name, check):
    """A property whose every assignment goes through check(problem, value), which returns the value to store."""
    attr = "_" + name

    def set_(self, value):
        setattr(self, attr, check(self, value))

    return property(lambda self: getattr(self, attr), set_)


def _stride_property(operand):
    """`operand`_strides: three non-negative integers, or None for the row-major strides of the current shape (read
    back as those strides)."""
    attr, (rows, cols) = f"_{operand}_strides", _OPERANDS[operand]

    def get(self):
        given = getattr(self, attr)
        sizes = dict(zip("BMKN", self._shape))
        return given if given is not None else _row_major(sizes[rows], sizes[cols], rows + cols)

    def set_(self, value):
        if value is None:
            sizes = dict(zip("BMKN", self._shape))
            _row_major(sizes[rows], sizes[cols], rows + cols)  # the default must fit this shape
            setattr(self, attr, None)
        else:
            setattr(self, attr, _strides(value, f"{operand}_strides"))

    return property(get, set_, doc=f"(batch, row, col) of {operand} in elements; None: row-major")
