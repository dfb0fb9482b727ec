"""Argument checks shared by EagerSGD and PartialAllreduceState.

The extension takes its integers as C++ unsigned types; pybind11 would refuse a negative or huge
one with a TypeError listing the whole signature. These checks name the argument instead and
raise eagercomm.InvalidArgumentError (a ValueError), as eagercomm._core does.
"""

import operator

from .. import InvalidArgumentError, InvalidTypeError

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1


def _error(cls, message):
    e = cls(f"invalid argument: {message}")
    e.code = "invalid argument"  # as on the errors eagercomm._core raises
    return e


def uint_arg(value, name, maximum=U32_MAX, hint=""):
    """`value` as an int in [0, maximum]."""
    try:
        v = operator.index(value)
    except TypeError:
        raise _error(InvalidTypeError,
                     f"{name} must be an int, got {type(value).__name__}") from None
    if v < 0:
        raise _error(InvalidArgumentError, f"{name} {v} is negative{hint}")
    if v > maximum:
        raise _error(InvalidArgumentError, f"{name} {v} is too large (at most {maximum})")
    return v
