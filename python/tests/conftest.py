"""Shared fixtures for the kvkey binding tests."""

import os
import subprocess
import sys

import pytest

import kvkey

# The probe prompt of lmdeploy issue #4930 (mc_probe_f2.py): 32 tokens x 12.
FRAGMENT = [35, 468, 136, 812, 14112, 44, 1730, 850, 4751, 1234, 47, 8024, 47, 360, 1738,
            715, 420, 12912, 2230, 823, 776, 596, 3442, 3363, 4950, 613, 15462, 46, 22, 10, 44, 711]
PROBE_PROMPT = FRAGMENT * 12


def pytest_configure(config):
    # Tests that need a live server carry one of these markers: stage 30-python (and ctest's
    # python label) deselect them with -m "not redis and not redis_cluster and not mooncake and not vllm";
    # stages 40-redis, 42-redis-cluster and 44-mooncake start the servers and run them.
    # Selected without their server they fail.
    config.addinivalue_line("markers", "redis: needs a redis-server (KVKEY_REDIS_PORT, stage 40-redis)")
    config.addinivalue_line("markers",
                            "redis_cluster: needs a Redis Cluster (KVKEY_CLUSTER_NODES, stage 42-redis-cluster)")
    config.addinivalue_line("markers", "mooncake: needs a Mooncake master (MOONCAKE_MASTER_ADDR, stage 44-mooncake)")
    config.addinivalue_line("markers", "vllm: needs vLLM's CPU build (scripts/venv.sh vllm, stage 47-vllm)")


def server_env(var, stage, marker):
    """The value of var, which names the server a marked test needs; fails (never skips) when unset."""
    value = os.environ.get(var)
    if not value:
        pytest.fail(f"{var} is not set: this test needs the server scripts/ci/stages/{stage}.sh starts; "
                    f"deselect it with -m 'not {marker}'", pytrace=False)
    return value


def pytest_report_header(config):
    return f"kvkey module: {kvkey._kvkey.__file__}"


@pytest.fixture(scope="session", autouse=True)
def _tested_module_is_the_expected_one():
    """When the build says which module it means to test, make sure it is that one."""
    expected = os.environ.get("KVKEY_EXPECT_MODULE_DIR")
    if expected:
        actual = os.path.dirname(os.path.realpath(kvkey._kvkey.__file__))
        assert actual == os.path.realpath(expected), f"testing {actual}, expected {expected}"


def make_identity(**changes):
    """A valid identity like examples/seed_probe: Qwen2.5-0.5B-Instruct, fp16, block 64."""
    i = kvkey.Identity()
    i.tenant = "team-a"
    i.model.name = "Qwen2.5-0.5B-Instruct"
    i.model.revision = "7ae557604adf67be50417f59c2c2f167def9a775"
    i.kv.dtype = "fp16"
    i.kv.block_size = 64
    i.kv.num_layers = 24
    i.kv.num_kv_heads = 2
    i.kv.head_dim = 64
    i.kv.layout = "lmdeploy.mooncake.v1"
    for path, value in changes.items():
        target = i
        parts = path.split("__")
        for part in parts[:-1]:
            target = getattr(target, part)
        setattr(target, parts[-1], value)
    return i


# A quantized cache with scales leaves the payload size open (ns.payload_size is None), so a
# connector over it takes payloads of any size: for tests whose payloads are not a real
# block's bytes. (A connector checks the size whenever the identity fixes it.)
UNSIZED = dict(kv__dtype="int8", kv__quant__scheme="per_token_head", kv__quant__group_size=64,
               kv__quant__scale_dtype="fp16")


def make_unsized_identity(**changes):
    return make_identity(**{**UNSIZED, **changes})


@pytest.fixture
def identity():
    return make_identity()


@pytest.fixture
def ns(identity):
    return kvkey.KeyNamespace(identity)


def in_fresh_interpreter(code, *args):
    """Runs code in a new interpreter (sys.argv[1:] = args) and returns the
    CompletedProcess. The timeout only keeps a regression that would hang (a
    blocking open) or crash (deep recursion) from taking the suite with it:
    tests assert on what the code printed, never on time."""
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ))
