"""Fixtures' building blocks for the lmdeploy integration tests.

The tests drive lmdeploy's real connector classes through examples/lmdeploy/tiny_engine.py,
whose fakes stand in for engine objects only (``FakeDeviceRow``, ``FakeEvent``,
``fake_local_hostname``, ``FakeSequence``, ``FakeAgent``, ``FakeEngine``). They need
lmdeploy (``scripts/venv.sh lmdeploy mooncake``) and a Mooncake master
(``MOONCAKE_MASTER_ADDR``, ``MOONCAKE_METADATA_URL``: stage 46-lmdeploy starts one); without
either they fail, naming it.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
EXAMPLE = os.path.join(ROOT, "examples", "lmdeploy")


def require_lmdeploy() -> Any:
    """The tiny engine module, or a failure naming what is missing."""
    for mod, how in (("torch", "scripts/venv.sh lmdeploy"), ("lmdeploy", "scripts/venv.sh lmdeploy"),
                     ("mooncake.store", "scripts/venv.sh mooncake")):
        try:
            importlib.import_module(mod)
        except ImportError as e:
            pytest.fail(f"{mod} is not importable ({e}): run these tests with the venv's python after `{how}` "
                        "(stage scripts/ci/stages/46-lmdeploy.sh does)", pytrace=False)
    if EXAMPLE not in sys.path:
        sys.path.insert(0, EXAMPLE)
    return importlib.import_module("tiny_engine")


def mooncake_env() -> tuple:
    out = []
    for var in ("MOONCAKE_MASTER_ADDR", "MOONCAKE_METADATA_URL"):
        value = os.environ.get(var)
        if not value:
            pytest.fail(f"{var} is not set: these tests need the Mooncake master scripts/ci/stages/46-lmdeploy.sh "
                        "starts (eval \"$(scripts/mooncake.sh start)\")", pytrace=False)
        out.append(value)
    return tuple(out)


def prompt(seed: int, n: int = 70) -> list:
    """A prompt of ``n`` tokens (vocabulary 96) that no other test uses."""
    return [(seed * 31 + i * 7 + (i * i) % 13) % 96 for i in range(n)]
