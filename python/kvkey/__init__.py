"""kvkey: lineage-aware keys and fail-closed envelopes for shared LLM KV-cache stores.

The compiled core lives in ``kvkey._kvkey``; this package re-exports it. Digests
(block hashes, fingerprints, roots) are 32-byte ``bytes``. See docs/python.md.
"""

from ._kvkey import (  # noqa: F401  (re-exports)
    Adapter,
    Chain,
    CryptoError,
    Error,
    Identity,
    IdentityError,
    InputError,
    IoError,
    KeyNamespace,
    Kv,
    KvDtype,
    Metrics,
    Model,
    OpenedValue,
    Quant,
    ReusablePrefix,
    Shard,
    Slice,
    TenantSecret,
    Verdict,
    __version__,
    dtype_bits,
    dtype_itemsize,
    envelope_size,
    fingerprint,
    fingerprint_file,
    format_version,
    glob_escape,
    kv_dtype_from_engine,
    kv_dtype_from_string,
    metrics_field_names,
    reusable_prefix,
    secret_id,
    secret_key_prefix,
    single_tenant_name,
    store_key_tag,
)
from . import compat  # noqa: F401
from . import stores  # noqa: F401
from .connector import Connector  # noqa: F401
from . import testing  # noqa: F401

__all__ = [
    "Adapter",
    "Chain",
    "Connector",
    "CryptoError",
    "Error",
    "Identity",
    "IdentityError",
    "InputError",
    "IoError",
    "KeyNamespace",
    "Kv",
    "KvDtype",
    "Metrics",
    "Model",
    "OpenedValue",
    "Quant",
    "ReusablePrefix",
    "Shard",
    "Slice",
    "TenantSecret",
    "Verdict",
    "compat",
    "dtype_bits",
    "dtype_itemsize",
    "envelope_size",
    "fingerprint",
    "fingerprint_file",
    "glob_escape",
    "format_version",
    "kv_dtype_from_engine",
    "kv_dtype_from_string",
    "metrics_field_names",
    "reusable_prefix",
    "secret_id",
    "secret_key_prefix",
    "single_tenant_name",
    "store_key_tag",
    "stores",
    "testing",
    "u64_projection",
]


def u64_projection(digest: bytes) -> int:
    """The 64-bit projection of a block hash for indexes keyed on u64
    (docs/format.md, section 11): its first 8 bytes read big-endian, so the
    value's 16 hex digits are the first 16 hex digits of the digest."""
    b = bytes(memoryview(digest))
    if len(b) != 32:
        raise InputError(f"digest must be 32 bytes, got {len(b)}")
    return int.from_bytes(b[:8], "big")
