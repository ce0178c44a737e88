"""kvq.Error and one subclass per status code of include/kvq.h."""
from __future__ import annotations

from typing import Dict, Optional, Type

from . import _lib


class Error(Exception):
    """A failed kvq call.

    Attributes:
        status: the library's status code (a negative KVQ_ERR_* value; 0 for
            errors raised by the Python layer itself, such as a closed object).
        reason: kvq_strerror(status), the library's name for the status.
        argument: the offending argument (a spec, a path, a shape), or None.
        detail: the one-line reason the C function wrote (functions taking
            ``err, err_cap``), or None.
    """

    status: int = 0

    def __init__(self, message: str = "", *, status: Optional[int] = None, argument: object = None,
                 detail: Optional[str] = None, call: Optional[str] = None) -> None:
        if status is not None:
            self.status = status
        self.reason = _lib.strerror(self.status) if self.status else ""
        self.argument = argument
        self.detail = detail or None
        self.call = call
        if not message:
            parts = []
            if call:
                parts.append(f"{call}:")
            parts.append(self.reason)
            if argument is not None:
                parts.append(f"({argument!r})")
            if self.detail:
                parts.append(f"- {self.detail}")
            message = " ".join(parts)
        super().__init__(message)


class NullPointerError(Error, ValueError):
    """KVQ_ERR_NULL: a required pointer is NULL."""
    status = -1


class InvalidArgumentError(Error, ValueError):
    """KVQ_ERR_INVALID_ARG: an argument is out of its domain."""
    status = -2


class UnsupportedDimError(Error, ValueError):
    """KVQ_ERR_UNSUPPORTED_DIM: head dim not supported (32..512, multiple of 8)."""
    status = -3


class BitsRangeError(Error, ValueError):
    """KVQ_ERR_BITS_RANGE: bit width out of the method's range."""
    status = -4


class UnknownMethodError(Error, ValueError):
    """KVQ_ERR_UNKNOWN_METHOD: the method spec could not be parsed."""
    status = -5


class NonFiniteError(Error, ValueError):
    """KVQ_ERR_NONFINITE: the input holds NaN or Inf."""
    status = -6


class RangeError(Error, ValueError):
    """KVQ_ERR_RANGE: a value does not fit the stored format (e.g. > 65504 in an f16 cache)."""
    status = -7


class SizeOverflowError(Error, OverflowError):
    """KVQ_ERR_OVERFLOW: a size computation overflows."""
    status = -8


class OutOfMemoryError(Error, MemoryError):
    """KVQ_ERR_NOMEM: an allocation failed."""
    status = -9


class NoDecodeError(Error, ValueError):
    """KVQ_ERR_NO_DECODE: key-only method (qjl, tq-prod): no reconstruction."""
    status = -10


class NeedsCalibrationError(Error, ValueError):
    """KVQ_ERR_NEEDS_CALIBRATION: the method needs calibration rows (+outliers)."""
    status = -11


class FileIOError(Error, OSError):
    """KVQ_ERR_IO: a file could not be opened, read or written."""
    status = -12


class FormatError(Error, ValueError):
    """KVQ_ERR_FORMAT: a file is not in the expected format."""
    status = -13


class TruncatedError(FormatError):
    """KVQ_ERR_TRUNCATED: a file or buffer is shorter than declared."""
    status = -14


class UnsupportedError(Error, NotImplementedError):
    """KVQ_ERR_UNSUPPORTED: a valid request this build or CPU cannot serve."""
    status = -15


class StateError(Error, RuntimeError):
    """KVQ_ERR_STATE: the call is not valid in the object's current state."""
    status = -16


class ChecksumError(FormatError):
    """KVQ_ERR_CHECKSUM: a stored checksum does not match."""
    status = -17


class ClosedError(Error, ValueError):
    """The object was closed (``close()`` or ``with``); raised by the Python layer, status 0."""
    status = 0


BY_STATUS: Dict[int, Type[Error]] = {
    cls.status: cls
    for cls in (NullPointerError, InvalidArgumentError, UnsupportedDimError, BitsRangeError, UnknownMethodError,
                NonFiniteError, RangeError, SizeOverflowError, OutOfMemoryError, NoDecodeError,
                NeedsCalibrationError, FileIOError, FormatError, TruncatedError, UnsupportedError, StateError,
                ChecksumError)
}


class UnknownStatusError(Error, RuntimeError):
    """A status code this version of the Python package does not know."""


def error_for(status: int, *, call: str, argument: object = None, detail: Optional[str] = None) -> Error:
    cls = BY_STATUS.get(status)
    if cls is None:
        return UnknownStatusError(status=status, call=call, argument=argument, detail=detail)
    return cls(status=status, call=call, argument=argument, detail=detail)


def check(status: int, call: str, argument: object = None, detail: Optional[str] = None) -> None:
    """Raises the Error subclass of a non-zero status."""
    if status:
        raise error_for(status, call=call, argument=argument, detail=detail)
