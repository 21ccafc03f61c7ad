"""lmdeploy's legacy Mooncake store keys, reproduced bit for bit.

For recognising, enumerating and purging the entries the legacy scheme wrote,
and for testing a migration; never for new keys (the scheme has no tenant, KV
format, revision or weights epoch). See docs/integration/lmdeploy.md.
"""

from .._kvkey import compat_lmdeploy as _c

BLOCK_HASH_SCHEMA = _c.BLOCK_HASH_SCHEMA
DEFAULT_MODEL_NAME = _c.DEFAULT_MODEL_NAME
LegacyKey = _c.LegacyKey
build_prefix_block_hashes = _c.build_prefix_block_hashes
build_store_key = _c.build_store_key
kv_head_replica_num = _c.kv_head_replica_num
kv_head_rank = _c.kv_head_rank
shard_key_count = _c.shard_key_count
lookup_keys = _c.lookup_keys
parse_key = _c.parse_key
is_legacy_key = _c.is_legacy_key
is_legacy_key_of = _c.is_legacy_key_of
purge_pattern = _c.purge_pattern
purge_glob = _c.purge_glob

__all__ = [
    "BLOCK_HASH_SCHEMA",
    "DEFAULT_MODEL_NAME",
    "LegacyKey",
    "build_prefix_block_hashes",
    "build_store_key",
    "is_legacy_key",
    "is_legacy_key_of",
    "kv_head_rank",
    "kv_head_replica_num",
    "lookup_keys",
    "parse_key",
    "purge_glob",
    "purge_pattern",
    "shard_key_count",
]
