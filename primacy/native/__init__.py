"""Plain C++ loops built on first use by the machine's compiler and called through ctypes: the plugins' compiled
kernels (primacy-mamba's scan, primacy-xlstm's sLSTM) share this one way to build, cache and load them.

No PyTorch headers are involved: ``$CXX`` (default ``c++``) builds a source file once (seconds; the xLSTM plugin's
mLSTM library, specialised by head width for three instruction sets, about 100 s) into
``$PRIMACY_KERNEL_CACHE`` (default ``~/.cache/primacy/kernels``), under a name that hashes the source, the headers
it may include (this folder's, on the compiler's include path), the compiler, its flags and the machine's
architecture (a cache in a home directory may be shared by a cluster's nodes), written atomically (concurrent runs
may build it at once), and refused if its ABI is not the caller's. Every failure is a one-line UsageError that names
the setting that asked for the library and the one to use instead.

The folder holds no module but this one; its header ``fast_math.h`` (the float maths the kernels share: fast_exp,
log1p_unit, sigmoid, scalar and 8-wide) is package data (pyproject's ``[tool.setuptools.package-data]``).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from primacy.errors import UsageError

# No -march (a cache may be shared by machines); no fused multiply-adds, so every build rounds alike.
FLAGS = ("-O3", "-fno-trapping-math", "-ffp-contract=off", "-std=c++17", "-shared", "-fPIC")
# the headers a source may include (#include "fast_math.h"): this folder, given to the compiler with -I
INCLUDE = Path(__file__).parent


def headers() -> list[Path]:
    """The headers of ``INCLUDE``, in name order: their text is part of every library's cache key."""
    return sorted(INCLUDE.glob("*.h"))


def compiler() -> str:
    return os.environ.get("CXX", "c++")


def cache_dir() -> Path:
    return Path(os.environ.get("PRIMACY_KERNEL_CACHE", Path.home() / ".cache" / "primacy" / "kernels"))


@dataclass(frozen=True)
class NativeLibrary:
    """One C++ source built into a shared library.

    source: the .cpp file.
    prefix: the library's file name before its hash (``primacy_scan``).
    abi: what the source's ``<prefix>_abi()`` returns for the caller's calls to hold.
    setting: the setting that asks for it, as errors name it (``scan='compiled'``).
    fallback: what to use instead, as errors say it (``use scan='chunked'``).
    owner: what the library is, for a stale file's error (``this primacy-mamba's scan``).
    """

    source: Path
    prefix: str
    abi: int
    setting: str
    fallback: str
    owner: str

    def path(self) -> Path:
        """Where the build of the source (and the headers it may include) by this compiler with FLAGS for this
        architecture is kept."""
        shared = [f"{header.name}\0{header.read_text()}" for header in headers()]
        parts = [self.source.read_text(), *shared, compiler(), *FLAGS, platform.machine(), platform.system()]
        key = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
        return cache_dir() / f"{self.prefix}_{key}.so"

    def load(self) -> ctypes.CDLL:
        """The library, built unless ``path()`` holds it already; UsageError (one line) when it cannot be built or
        loaded, or is not of this ABI."""
        path = self.path()
        if not path.is_file():
            self._build(compiler(), path)
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as err:  # a mount that forbids executing files, a file from another architecture
            raise UsageError(f"{self.setting}: {path} cannot be loaded ({err}): set PRIMACY_KERNEL_CACHE to a "
                             f"directory that allows it, or {self.fallback}") from None
        if getattr(lib, f"{self.prefix}_abi")() != self.abi:
            raise UsageError(f"{path} is not {self.owner}: delete it so that it is built again")
        return lib

    def _build(self, cxx: str, path: Path) -> None:
        """Compiles the source into ``path``: into a temporary file beside it first, renamed into place when
        complete."""
        if shutil.which(cxx) is None:
            raise UsageError(f"{self.setting} needs a C++ compiler and {cxx!r} (CXX) is not one on PATH: install one "
                             f"(g++ or clang++) or {self.fallback}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UsageError(f"PRIMACY_KERNEL_CACHE={path.parent} cannot be created: {err.strerror}") from None
        fd, partial = tempfile.mkstemp(suffix=".so", prefix=".building-", dir=path.parent)
        os.close(fd)
        try:
            command = [cxx, *FLAGS, f"-I{INCLUDE}", str(self.source), "-o", partial]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                lines = done.stderr.strip().splitlines()
                detail = next((line for line in lines if "error" in line), lines[0] if lines else "")
                raise UsageError(f"{self.setting}: {cxx} failed to build {self.source.name}: "
                                 f"{detail.strip()[:200] or f'exit code {done.returncode}'}; {self.fallback}")
            os.replace(partial, path)
        finally:
            if os.path.exists(partial):
                os.remove(partial)
