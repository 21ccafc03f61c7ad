"""Error messages speak Python: no error the binding raises names a C++
spelling (kvkey::..., Policy::..., PayloadCheck::...). Every known error path
is driven and its message grepped."""

import re

import numpy as np
import pytest

import kvkey
from conftest import PROBE_PROMPT, make_identity

CPP = re.compile(r"kvkey::|Policy::|PayloadCheck::|TenantPolicy::|std::")

H = b"\x01" * 32


def size_only_ns():
    return kvkey.KeyNamespace(make_identity(), payload_check="size_only")


def ns():
    return kvkey.KeyNamespace(make_identity())


def set_attr(obj, name, value):
    setattr(obj, name, value)


# Each entry: a call that must raise (any exception the binding raises).
PATHS = {
    "seal size only under required": lambda: ns().seal(H, 100),
    "empty tenant": lambda: kvkey.KeyNamespace(make_identity(tenant="")),
    "tenant under single_tenant": lambda: kvkey.KeyNamespace(make_identity(), single_tenant=True),
    "bad tenant bytes": lambda: kvkey.KeyNamespace(make_identity(tenant="a b")),
    "tenant start": lambda: kvkey.KeyNamespace(make_identity(tenant="_x")),
    "empty model name": lambda: kvkey.KeyNamespace(make_identity(model__name="")),
    "revision with space": lambda: kvkey.KeyNamespace(make_identity(model__revision="a b")),
    "dtype unset": lambda: kvkey.KeyNamespace(make_identity(kv__dtype="unset")),
    "unknown dtype": lambda: make_identity(kv__dtype="bfloat17"),
    "quant group without scheme": lambda: kvkey.KeyNamespace(make_identity(kv__quant__group_size=4)),
    "bad scheme": lambda: kvkey.KeyNamespace(make_identity(kv__quant__scheme="A B")),
    "block size 0": lambda: kvkey.KeyNamespace(make_identity(kv__block_size=0)),
    "tp does not divide": lambda: kvkey.KeyNamespace(make_identity(shard__tp_size=3)),
    "tp rank": lambda: kvkey.KeyNamespace(make_identity(shard__tp_size=2, shard__tp_rank=2)),
    "pp does not divide": lambda: kvkey.KeyNamespace(make_identity(shard__pp_size=5)),
    "payload_check": lambda: kvkey.KeyNamespace(make_identity(), payload_check="none"),
    "secret too short": lambda: kvkey.TenantSecret(b"x"),
    "secret env": lambda: kvkey.TenantSecret.from_env("KVKEY_TEST_NO_SUCH_VARIABLE"),
    "secret file": lambda: kvkey.TenantSecret.from_file("/nonexistent/kvkey-secret"),
    "token out of range": lambda: ns().block_hashes([-1] * 64),
    "token too big": lambda: ns().block_hashes([2**33] * 64),
    "previous longer than tokens": lambda: ns().block_hashes([1] * 64, previous=[H, H]),
    "extras order": lambda: ns().block_hashes(PROBE_PROMPT, extras=[(5, 1, b"k")]),
    "batch sequence": lambda: ns().block_hashes_batch([[1] * 64, [-5] * 64]),
    "block hash size": lambda: ns().store_key(b"x"),
    "block hash str": lambda: ns().store_key("00" * 32),
    "results": lambda: ns().reusable_prefix([None], 1),
    "results int": lambda: ns().reusable_prefix([7], 1),
    "shards": lambda: ns().reusable_prefix([True], -1),
    "fingerprint_file": lambda: kvkey.fingerprint_file("/nonexistent/kvkey-file"),
    "from_model_dir": lambda: kvkey.Identity.from_model_dir("/nonexistent", tenant="t", kv_dtype="fp16",
                                                            block_size=64, layout="x"),
    "seal_value payload": lambda: ns().seal_value(H, 5),
    "open_values lengths": lambda: ns().open_values([b""], []),
    "dtype_itemsize int4": lambda: kvkey.dtype_itemsize("int4"),
    "engine auto": lambda: kvkey.kv_dtype_from_engine("auto"),
    "engine unknown": lambda: kvkey.kv_dtype_from_engine("complex64"),
    "engine scales inside": lambda: kvkey.kv_dtype_from_engine("fp8_inc"),
    "quant_policy": lambda: kvkey.kv_dtype_from_engine(0),
    "kv.block_size type": lambda: set_attr(kvkey.Kv(), "block_size", "16"),
    "kv.block_size range": lambda: set_attr(kvkey.Kv(), "block_size", 2**40),
    "identity.model type": lambda: set_attr(kvkey.Identity(), "model", 3),
    "validated": lambda: make_identity(tenant="").validated(),
    "validated single": lambda: make_identity().validated(single_tenant=True),
    "chain append": lambda: ns().chain().append([-1]),
    "lmdeploy shard keys": lambda: kvkey.compat.lmdeploy.lookup_keys("", "m", 10**6, []),
    "numpy float tokens": lambda: ns().block_hashes(np.zeros(64, dtype=np.float32)),
}


@pytest.mark.parametrize("name", sorted(PATHS))
def test_error_messages_use_python_names(name):
    with pytest.raises(Exception) as info:
        PATHS[name]()
    message = str(info.value)
    assert message, name
    assert not CPP.search(message), f"{name}: {message}"


def test_the_payload_policy_error_names_the_python_option():
    with pytest.raises(kvkey.InputError) as info:
        ns().seal(H, 100)
    assert "payload_check='size_only'" in str(info.value)
    assert "pass the payload bytes" in str(info.value)
    assert size_only_ns().seal(H, 100)  # the option it names works


def test_the_tenant_errors_name_single_tenant_true():
    with pytest.raises(kvkey.IdentityError, match=r"single_tenant=True") as info:
        kvkey.KeyNamespace(make_identity(tenant=""))
    assert info.value.field == "tenant"
    with pytest.raises(kvkey.IdentityError, match=r"must be empty with single_tenant=True"):
        kvkey.KeyNamespace(make_identity(), single_tenant=True)


def test_every_exception_class_names_its_category():
    """.id and .field hold on each class, so an error raised from Python (the connector kit's)
    reads like one raised by the compiled core."""
    classes = {
        kvkey.Error: "kvkey.error",
        kvkey.IdentityError: "kvkey.identity_error",
        kvkey.InputError: "kvkey.input_error",
        kvkey.IoError: "kvkey.io_error",
        kvkey.CryptoError: "kvkey.crypto_error",
    }
    for cls, category in classes.items():
        assert (cls.id, cls.field) == (category, "")
    with pytest.raises(kvkey.InputError) as e:
        kvkey.Connector(kvkey.stores.MemoryStore(), [])
    assert e.value.id == "kvkey.input_error"
    with pytest.raises(kvkey.InputError) as e:
        kvkey.KeyNamespace(make_identity()).seal(b"\0" * 31, b"")
    assert e.value.id == "kvkey.input_error"
