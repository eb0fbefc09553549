"""primacy.native: a source that includes the shared header builds against it, once, into the cache (the library alone
beside nothing partial) and is loaded from there afterwards; the header's text is part of the cache key, so an edited
header builds the library again."""

import ctypes
import shutil

import pytest

import primacy.native
from primacy.native import NativeLibrary

SOURCE = """#include "fast_math.h"
extern "C" {
int tiny_abi() { return 3; }
float tiny_exp(float x) { return primacy::fast_exp(x); }
float tiny_sigmoid(float x) { return primacy::sigmoid(x); }
}
"""


def tiny(tmp_path) -> NativeLibrary:
    source = tmp_path / "tiny.cpp"
    source.write_text(SOURCE)
    return NativeLibrary(source, "tiny", 3, "tiny='compiled'", "use tiny='pytorch'", "the test's library")


@pytest.mark.skipif(shutil.which(primacy.native.compiler()) is None, reason="no C++ compiler")
def test_a_source_including_the_shared_header_builds_and_computes_its_maths(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIMACY_KERNEL_CACHE", str(tmp_path / "kernels"))
    library = tiny(tmp_path).load()
    for name in ("tiny_exp", "tiny_sigmoid"):
        getattr(library, name).restype, getattr(library, name).argtypes = ctypes.c_float, [ctypes.c_float]
    assert library.tiny_exp(0.0) == 1.0  # exactly: the sLSTM's gate ties rely on it
    assert library.tiny_exp(1.0) == pytest.approx(2.718281828, rel=3e-7)
    assert library.tiny_exp(-1000.0) == pytest.approx(1.6458e-38, rel=1e-3)  # clamped to e^-87, not subnormal
    assert library.tiny_sigmoid(2.0) == pytest.approx(0.880797078, rel=1e-6)


@pytest.mark.skipif(shutil.which(primacy.native.compiler()) is None, reason="no C++ compiler")
def test_a_library_is_built_once_into_the_cache_and_then_loaded_from_it(tmp_path, monkeypatch):
    """As every plugin's kernels are (primacy-mamba's whole scan: its slow test)."""
    monkeypatch.setenv("PRIMACY_KERNEL_CACHE", str(tmp_path / "kernels"))
    library = tiny(tmp_path)
    assert library.load().tiny_abi() == 3
    [built] = (tmp_path / "kernels").iterdir()  # the library alone: no partial file is left beside it
    assert built == library.path() and built.name.startswith("tiny_") and built.suffix == ".so"
    monkeypatch.setattr(primacy.native.subprocess, "run", lambda *args, **kwargs: pytest.fail("built again"))
    assert tiny(tmp_path).load().tiny_abi() == 3  # a new process's load: found in the cache


def test_the_shared_header_is_on_the_include_path_and_in_the_cache_key(tmp_path, monkeypatch):
    assert (primacy.native.INCLUDE / "fast_math.h") in primacy.native.headers()
    include = tmp_path / "include"
    include.mkdir()
    header = include / "fast_math.h"
    header.write_text((primacy.native.INCLUDE / "fast_math.h").read_text())
    monkeypatch.setattr(primacy.native, "INCLUDE", include)
    library = tiny(tmp_path)
    before = library.path()
    assert library.path() == before  # a key, not a draw
    header.write_text(header.read_text() + "\n// edited\n")
    assert library.path() != before
