"""kvkey inside engines as their users install them.

Each submodule plugs kvkey into one engine's own code at run time (nothing of the engine
is copied or patched on disk):

- ``kvkey.integrations.lmdeploy``: lmdeploy's Mooncake store KV connector
  (``lmdeploy.pytorch.kv_connector.mooncake.store``); see docs/integration/lmdeploy.md.
- ``kvkey.integrations.vllm``: ``KvkeyConnector``, a vLLM KV connector (``KVConnectorBase_V1``)
  that vLLM loads by name from ``--kv-transfer-config``; see docs/integration/vllm.md.

Importing this package imports no engine.
"""

__all__ = ["lmdeploy", "vllm"]
