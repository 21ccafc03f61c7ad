"""What the engine integrations (``kvkey.integrations.lmdeploy``, ``.vllm``) share: the
configuration error that names a setting, the identity of a deployment read from its
model directory with kvkey's errors turned into that error, and a namespace per
(adapter, weights epoch, rank) made on demand. Private: the integrations re-export what
their users need."""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, Dict, Hashable, Optional

import kvkey


class EngineConfigError(ValueError):
    """A configuration an integration cannot make an identity from. ``setting`` names it."""

    #: The module whose configuration it is; each integration's subclass sets it.
    integration = "kvkey.integrations"

    def __init__(self, setting: str, detail: str) -> None:
        super().__init__(f"{self.integration}: {setting}: {detail}")
        self.setting = setting


def model_identity(error: Callable[[str, str], Exception], model_path: str, *, adapter_dir: Optional[str] = None,
                   adapter_name: Optional[str] = None, **fields: Any) -> kvkey.Identity:
    """``kvkey.Identity.from_model_dir(model_path, adapter_dir=..., **fields)`` with
    kvkey's refusals raised as ``error(setting, detail)``: an unreadable file names
    ``adapters`` (when it is the adapter's) or ``model_path``, an invalid field the field
    (``revision`` for a revision kvkey refuses)."""
    try:
        return kvkey.Identity.from_model_dir(model_path, adapter_dir=adapter_dir, adapter_name=adapter_name, **fields)
    except kvkey.IoError as e:
        setting = "adapters" if adapter_dir else "model_path"
        raise error(setting, f"cannot read {adapter_dir if adapter_dir else model_path!r}: {e}") from None
    except kvkey.Error as e:
        raise error(setting_of(e), str(e)) from None


def resolve_tenant(error: Callable[[str, str], Exception], tenant: Any, single_tenant: bool, *, both: str,
                   missing: str) -> str:
    """The tenant of the settings: empty with ``single_tenant`` (``error("tenant", both)``
    when one is given too), else a non-empty string (``error("tenant", missing)``)."""
    if single_tenant:
        if tenant:
            raise error("tenant", both)
        return ""
    if not isinstance(tenant, str) or not tenant:
        raise error("tenant", missing)
    return tenant


def setting_of(e: Exception) -> str:
    """The setting a kvkey error of an identity names: its field, else ``revision`` for a
    revision kvkey refuses, else ``model_path``."""
    return str(getattr(e, "field", None) or ("revision" if "revision" in str(e) else "model_path"))


def dtype_name(dtype: Any) -> str:
    """A torch dtype (or its name) as kvkey and the engines spell it: ``torch.bfloat16`` ->
    ``"bfloat16"``."""
    return str(dtype).replace("torch.", "")


def namespace_of(error: Callable[[str, str], Exception], identity: kvkey.Identity,
                 **options: Any) -> kvkey.KeyNamespace:
    """``kvkey.KeyNamespace(identity, **options)`` with an invalid identity raised as
    ``error(field, detail)``."""
    try:
        return kvkey.KeyNamespace(identity, **options)
    except kvkey.IdentityError as err:
        raise error(str(getattr(err, "field", None) or "identity"), str(err)) from None


class NamespaceCache:
    """Namespaces built on demand by ``make(key)`` and kept per key; thread-safe.
    ``retain(keep)`` drops those whose key ``keep`` refuses (a rotated epoch)."""

    def __init__(self, make: Callable[[Any], kvkey.KeyNamespace]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._ns: Dict[Hashable, kvkey.KeyNamespace] = {}

    def get(self, key: Hashable) -> kvkey.KeyNamespace:
        with self._lock:
            ns = self._ns.get(key)
        if ns is None:
            ns = self._make(key)
            with self._lock:
                ns = self._ns.setdefault(key, ns)
        return ns

    def retain(self, keep: Callable[[Any], bool]) -> None:
        with self._lock:
            self._ns = {k: v for k, v in self._ns.items() if keep(k)}


def readable_dir(path: Any) -> Optional[str]:
    """``path`` as a string when it is a directory this process can list, else None."""
    if path is None or not isinstance(path, (str, os.PathLike)):
        return None
    p = os.fspath(path)
    return p if os.path.isdir(p) and os.access(p, os.R_OK | os.X_OK) else None
