"""examples/python/engine_tp2.py, the engine-shaped example of docs/python.md, against a
live redis-server (marked redis: stage 40-redis runs it)."""

import importlib.util
import pathlib

import pytest

from conftest import server_env

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python" / "engine_tp2.py"


@pytest.mark.redis
def test_engine_tp2_example_runs_against_redis():
    port = int(server_env("KVKEY_REDIS_PORT", "40-redis", "redis"))
    spec = importlib.util.spec_from_file_location("engine_tp2", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(port, tenant="example-test") == 5


def test_the_example_has_no_gather_or_scatter():
    text = EXAMPLE.read_text()
    for glue in ("concatenate", "tobytes", "frombuffer", "b\"\".join", "np.copyto"):
        assert glue not in text
