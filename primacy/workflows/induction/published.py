"""Reading the per-head results Ji-An et al. (2024) published with their code (corxyz/icl-cmr, MIT) without running
their pickles: the files are ``joblib.dump`` output, pickles with raw array bytes between the opcodes, and pickles
can call anything. ``read_published`` accepts numpy arrays (joblib's NumpyArrayWrapper layout and plain pickled
arrays), numpy scalars and dtypes, torch tensors (as torch's ``weights_only`` loader rebuilds them), and dicts,
lists, tuples, strings and numbers; anything else is refused in one line before it is called."""

from __future__ import annotations

import bz2
import collections
import gzip
import io
import lzma
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch

from primacy.errors import UsageError

_COMPRESSED = {b"\x1f\x8b": ("gzip", gzip.decompress), b"BZh": ("bz2", bz2.decompress),
               b"\xfd7zXZ": ("xz", lzma.decompress)}  # joblib.dump(compress=...) with the standard library's codecs
_WRAPPER_STATE = {"subclass", "shape", "order", "dtype", "allow_mmap", "numpy_array_alignment_bytes"}


class _Refused(Exception):
    """What the restricted unpickler met that it does not read; becomes the UsageError that names the file."""


class _ArrayWrapper:
    """Stands in for joblib's NumpyArrayWrapper: the array's shape, order and dtype, its bytes follow in the file."""


def _storage_from_bytes(data: bytes) -> Any:
    """A torch storage pickled by ``torch.save`` (legacy format) inside the outer pickle, read by torch's own
    ``weights_only`` unpickler, which accepts storages and tensors only (torch's ``_load_from_bytes`` would not)."""
    if not isinstance(data, bytes):
        raise _Refused(f"a torch storage made of {type(data).__name__}, not bytes")
    try:
        storage = torch.load(io.BytesIO(data), weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, TypeError, AttributeError) as error:
        reason = " ".join(str(error).split())[:200]  # torch's unpickler names what it refused
        raise _Refused(f"a torch storage torch's weights_only loader refused ({reason})") from None
    if not isinstance(storage, (torch.TypedStorage, torch.UntypedStorage)):
        raise _Refused(f"a torch storage that holds a {type(storage).__name__}")
    return storage


def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any, hooks: Any,
                    metadata: Any = None) -> torch.Tensor:
    """``torch._utils._rebuild_tensor_v2`` with its arguments checked: a storage, integers and no backward hooks."""
    shapes = isinstance(size, tuple) and isinstance(stride, tuple)
    integers = shapes and all(isinstance(v, int) for v in (offset, *size, *stride))
    if not isinstance(storage, (torch.TypedStorage, torch.UntypedStorage)) or not integers or hooks or metadata:
        raise _Refused("a torch tensor with unexpected arguments (storage, offset, size, stride, hooks)")
    return torch._utils._rebuild_tensor_v2(storage, offset, size, stride, bool(requires_grad),
                                           collections.OrderedDict())


def _numpy_globals() -> dict[tuple[str, str], Any]:
    """numpy's array and scalar constructors under the module names numpy 1 (numpy.core) and 2 (numpy._core) pickle."""
    multiarray = np._core.multiarray if hasattr(np, "_core") else np.core.multiarray
    return {(module, name): getattr(multiarray, name) for module in ("numpy.core.multiarray", "numpy._core.multiarray")
            for name in ("_reconstruct", "scalar")}


_GLOBALS: dict[tuple[str, str], Any] = {
    ("joblib.numpy_pickle", "NumpyArrayWrapper"): _ArrayWrapper,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    **_numpy_globals(),
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch.storage", "_load_from_bytes"): _storage_from_bytes,
    ("collections", "OrderedDict"): collections.OrderedDict,
}


class _Unpickler(pickle._Unpickler):
    """Python's pure-Python unpickler with only ``_GLOBALS`` importable and joblib's array layout read at BUILD."""

    dispatch = pickle._Unpickler.dispatch.copy()

    def __init__(self, stream: io.BytesIO):
        super().__init__(stream)
        self._stream = stream

    def find_class(self, module: str, name: str) -> Any:
        found = _GLOBALS.get((module, name))
        if found is None:
            raise _Refused(f"refers to {module}.{name}, which is not an array, a tensor or a plain value")
        return found

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused(f"holds a persistent id ({str(pid)[:60]}), which only a custom loader can resolve")

    def load_build(self) -> None:
        target = self.stack[-2] if len(self.stack) > 1 else None
        if isinstance(target, _ArrayWrapper):
            state = self.stack.pop()
            self.stack[-1] = self._read_array(state)
        elif isinstance(target, (np.ndarray, np.dtype)):  # a plain pickled array, its dtype: their own __setstate__
            pickle._Unpickler.load_build(self)
        else:
            raise _Refused(f"sets the state of a {type(target).__name__}, which is not an array")

    dispatch[pickle.BUILD[0]] = load_build

    def _read_array(self, state: Any) -> np.ndarray:
        """The array a NumpyArrayWrapper announces: one padding-length byte and padding (joblib >= 1.2), then the
        raw bytes in the wrapper's order; an array of Python objects is a nested pickle, read by this unpickler."""
        if not isinstance(state, dict) or not {"shape", "order", "dtype"} <= set(state) <= _WRAPPER_STATE:
            fields = sorted(state) if isinstance(state, dict) else state
            raise _Refused(f"holds a joblib array header with fields {fields}")
        shape, order, dtype = state["shape"], state["order"], state["dtype"]
        plain = state.get("subclass", np.ndarray) is np.ndarray and order in ("C", "F") and isinstance(dtype, np.dtype)
        if not plain or not isinstance(shape, tuple) or not all(isinstance(n, int) and n >= 0 for n in shape):
            raise _Refused(f"holds a joblib array header it cannot read (shape {shape!r}, order {order!r}, "
                           f"dtype {dtype!r})")
        if dtype.hasobject:
            nested = _Unpickler(self._stream)
            array = nested.load()
            if not isinstance(array, np.ndarray):
                raise _Refused(f"holds an object array that unpickles to a {type(array).__name__}")
            return array
        if state.get("numpy_array_alignment_bytes") is not None:
            padding = self._stream.read(1)
            if len(padding) < 1 or len(self._stream.read(padding[0])) < padding[0]:
                raise EOFError("the array padding ended early")
        count = int(np.prod(shape, dtype=np.int64))
        size = count * dtype.itemsize
        data = self._stream.read(size)
        if len(data) < size:
            raise EOFError(f"array data: expected {size} bytes of a {dtype} array of shape {shape}, found {len(data)}")
        array = np.frombuffer(data, dtype=dtype, count=count).copy()  # a writable array of its own
        array = array.reshape(shape[::-1]).T if order == "F" else array.reshape(shape)
        return array.astype(dtype.newbyteorder("="), copy=False) if not dtype.isnative else array


def _decompressed(path: Path, data: bytes) -> bytes:
    for magic, (name, decompress) in _COMPRESSED.items():
        if data.startswith(magic):
            try:
                return decompress(data)
            except (OSError, EOFError, ValueError, lzma.LZMAError) as error:
                raise UsageError(f"published file {str(path)!r} is not a readable {name} file "
                                 f"({' '.join(str(error).split())})") from None
    return data


def read_published(path: str | Path) -> Any:
    """What a file of corxyz/icl-cmr (``joblib.dump`` of dicts of arrays, tensors and plain values; compressed with
    gzip, bz2 or xz too) holds, read without executing anything it names: numpy arrays as numpy arrays, torch tensors
    as torch tensors, containers and scalars as themselves. A missing, empty, truncated or non-pickle file, or one
    that refers to any other class or function (it is never called), is a UsageError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"published file {str(path)!r} does not exist")
    data = _decompressed(path, path.read_bytes())
    if not data:
        raise UsageError(f"published file {str(path)!r} is empty: a joblib pickle was expected")
    if data[:1] != b"\x80":  # every pickle since protocol 2 starts with PROTO; joblib writes 4 or higher
        raise UsageError(f"published file {str(path)!r} is not a pickle (it starts with {data[:8]!r}): a "
                         f"joblib.dump file was expected")
    stream = io.BytesIO(data)
    try:
        content = _Unpickler(stream).load()
    except _Refused as refused:
        raise UsageError(f"published file {str(path)!r} {refused}: it was not read (only numpy arrays, torch "
                         f"tensors and plain containers are)") from None
    except (EOFError, pickle.UnpicklingError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            MemoryError, OverflowError, RuntimeError) as error:
        reason = " ".join(str(error).split()) or type(error).__name__
        truncated = isinstance(error, EOFError) or any(
            words in reason.lower() for words in ("ran out of input", "truncated", "exhausted before"))
        what = "is truncated" if truncated else "is not a readable joblib pickle"
        raise UsageError(f"published file {str(path)!r} {what} ({reason[:200]})") from None
    return content
