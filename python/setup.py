"""Builds kvkey._kvkey from the source tree's C++ headers (../include).

    pip install ./python                  # build requirements from PyPI (pinned in pyproject.toml)
    pip install --no-build-isolation ./python   # offline, with the venv's setuptools, wheel, pybind11

KVKEY_BUILD_JOBS sets how many sources compile at once (default: every core).
"""

import os
import re

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.normpath(os.path.join(HERE, "..", "include"))
if not os.path.isfile(os.path.join(INCLUDE, "kvkey", "kvkey.hpp")):
    raise SystemExit(
        f"kvkey: C++ headers not found at {INCLUDE}; build from the kvkey source tree "
        "(pip builds ./python in place, next to ../include)"
    )



def kvkey_version():
    """The library's version, from include/kvkey/config.hpp (the one place it is written)."""
    with open(os.path.join(INCLUDE, "kvkey", "config.hpp")) as f:
        text = f.read()
    parts = [re.search(r"^#define KVKEY_VERSION_%s (\d+)$" % p, text, re.M) for p in ("MAJOR", "MINOR", "PATCH")]
    if not all(parts):
        raise SystemExit("kvkey: KVKEY_VERSION_MAJOR/MINOR/PATCH not found in include/kvkey/config.hpp")
    return ".".join(m.group(1) for m in parts)


extension = Pybind11Extension(
    "kvkey._kvkey",
    # module.cpp and the bind_<area>.cpp files of src/ (bind_model_dir.cpp, bind_identity_file.cpp need nlohmann-json)
    ["src/module.cpp"] + sorted(os.path.join("src", f) for f in os.listdir(os.path.join(HERE, "src"))
                                if f.startswith("bind_") and f.endswith(".cpp")),
    include_dirs=[INCLUDE],
    libraries=["crypto", "xxhash"],  # OpenSSL 3 libcrypto (EVP), xxHash for payload digests
    cxx_std=17,
    # No debug information in the module (the interpreter's CFLAGS carry -g): a smaller
    # wheel and a faster build; the CMake build (-DKVKEY_BUILD_PYTHON=ON) keeps it.
    extra_compile_args=["-g0"],
)

ParallelCompile("KVKEY_BUILD_JOBS", default=0).install()

setup(version=kvkey_version(), ext_modules=[extension], cmdclass={"build_ext": build_ext})
