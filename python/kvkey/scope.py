"""Shared scopes (format v4, docs/format.md section 12): a prefix that several tenants
share on purpose, stored once in the scope's namespace (tenant ``_scope.<name>``), read
only by the tenants it grants and written only by its publishers; the blocks after it
continue in the tenant's own namespace, their hashes bound to the transition.

    scope = kvkey.SharedScope("support-bot", identity, readers=["acme"], publishers=["globex"])
    tenant = kvkey.KeyNamespace(identity, secret=secret)
    blocks = kvkey.scoped_block_hashes(scope.namespace, tenant, tokens, scope_tokens=128)

The serving side says how many tokens belong to the scope, never the prompt's text.
``ScopedConnector`` is the tenant's connector for such requests: it keeps the grants (a
scope read by a tenant it does not grant is a named miss, the store not asked; a publish
by a tenant that may not publish is ``ScopeError``, nothing written).
"""

from typing import Any, List, Optional, Sequence, Union

from ._kvkey import InputError, KeyNamespace, ScopeError, _scope_not_granted

__all__ = ["SharedScope", "ScopedConnector", "scoped_block_hashes"]


class SharedScope:
    """A shared scope as the operator declares it: its name, its namespace (the
    deployment's identity with tenant ``_scope.<name>``; plain, or keyed under the
    scope's own ``secret`` and then optionally ``confidential``) and its grants
    (tenant names; a publisher may read too)."""

    def __init__(self, name, identity, *, readers=(), publishers=(), secret=None, confidential=False,
                 payload_check="required"):
        self.name = name
        self.namespace = KeyNamespace(identity, secret=secret, confidential=confidential, scope=name,
                                      payload_check=payload_check)
        self.readers = tuple(readers)
        self.publishers = tuple(publishers)
        for t in self.readers + self.publishers:
            if not isinstance(t, str):
                raise InputError("scope grants name tenants as str, not %s" % type(t).__name__)

    def may_publish(self, tenant):
        return tenant in self.publishers

    def may_read(self, tenant):
        return tenant in self.readers or self.may_publish(tenant)

    def check_read(self, tenant):
        """None when tenant may read, else the miss to report: a Verdict not_granted on 'scope.readers'."""
        return None if self.may_read(tenant) else _scope_not_granted()

    def check_publish(self, tenant):
        """Raises ScopeError (.field 'scope.publishers') unless tenant may publish."""
        if not self.may_publish(tenant):
            e = ScopeError("tenant %r may not publish to shared scope %r: it is not one of the scope's publishers"
                           % (tenant, self.name))
            e.field = "scope.publishers"
            raise e

    def __repr__(self):
        return "SharedScope(%r, readers=%r, publishers=%r, key_prefix=%r)" % (
            self.name, list(self.readers), list(self.publishers), self.namespace.key_prefix)


def scoped_block_hashes(scope_namespace, tenant, tokens, scope_tokens, *, salt=None, extras=None):
    """The block hashes of a request whose first scope_tokens tokens belong to a shared scope:
    blocks [0, k), k = scope_tokens / block size, in the scope's chain (unsalted), the rest in
    the tenant's, bound to the transition (docs/format.md, "Scope transition"). scope_tokens
    must be a multiple of the block size (InputError otherwise); 0 gives tenant.block_hashes."""
    if isinstance(scope_namespace, SharedScope):
        scope_namespace = scope_namespace.namespace
    bs = tenant.block_size
    if scope_namespace.block_size != bs:
        raise InputError("the scope's block size is %d, the tenant's %d" % (scope_namespace.block_size, bs))
    if not isinstance(scope_tokens, int) or isinstance(scope_tokens, bool) or scope_tokens < 0:
        raise InputError("scope_tokens must be a non-negative int")
    if scope_tokens % bs:
        raise InputError("scope_tokens is %d, not a multiple of the block size %d: a block would belong to the "
                         "scope and to the tenant" % (scope_tokens, bs))
    if scope_tokens == 0:
        return tenant.block_hashes(tokens, salt=salt, extras=extras)
    head = scope_namespace.block_hashes(tokens[:scope_tokens], extras=extras)
    k = scope_tokens // bs
    if len(tokens) // bs <= k:
        if len(tokens) > scope_tokens:
            tenant.block_hashes(tokens[scope_tokens:])  # the tail's token ids are checked all the same
        return head
    previous = head[:-1] + [tenant.scope_transition(head[-1], salt=salt)]
    out = tenant.block_hashes(tokens, salt=salt, extras=extras, previous=previous)
    out[k - 1] = head[-1]
    return out


def _per_rank(value: Any, kind: type, what: str) -> List[Any]:
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not values or not all(isinstance(v, kind) for v in values):
        raise InputError("ScopedConnector: %s is a %s or a non-empty list of them, one per rank"
                         % (what, kind.__name__))
    return values


class ScopedConnector:
    """A tenant's ``kvkey.Connector`` for requests whose first ``scope_blocks`` blocks belong
    to a shared scope (the C++ ``kvkey::ScopedConnector``): those blocks are saved to, looked
    up in and loaded from the scope's namespace under its grants, the rest from the tenant's.

    ``scope`` is a ``SharedScope`` (or one per rank: the same name and grants over each rank's
    identity) and ``tenant`` the tenant's ``KeyNamespace`` (or one per rank); the tenant's
    name is its identity's. The other keyword arguments are ``kvkey.Connector``'s, for both
    halves (one ``metrics`` counts both). Block hashes come from ``block_hashes`` (that is,
    ``scoped_block_hashes``); every method takes the request's hashes and its
    ``scope_blocks`` (``InputError`` when it exceeds the hashes).

    - a tenant the scope does not grant: ``lookup`` counts 0, ``load`` gives ``None`` and
      ``load_into`` a ``missing`` result whose verdict is ``not_granted`` on
      ``scope.readers`` for each scope block, the store not asked; its private blocks are
      then unreachable in this request (the chain starts with the scope);
    - ``save`` with ``scope_blocks > 0`` by a tenant that may not publish raises
      ``ScopeError`` (``.field == "scope.publishers"``) before anything is written;
      ``save_private`` stores only the private blocks, as a reader that does not publish
      does."""

    def __init__(self, store: Any, scope: Union[SharedScope, Sequence[SharedScope]],
                 tenant: Union[KeyNamespace, Sequence[KeyNamespace]], **options: Any) -> None:
        from .connector import Connector

        scopes = _per_rank(scope, SharedScope, "scope")
        tenants = _per_rank(tenant, KeyNamespace, "tenant")
        if len(scopes) != len(tenants):
            raise InputError("ScopedConnector: %d scope namespaces but %d tenant namespaces: one of each per rank"
                             % (len(scopes), len(tenants)))
        names = {(s.name, s.readers, s.publishers) for s in scopes}
        if len(names) != 1:
            raise InputError("ScopedConnector: the ranks' scopes differ in name or grants")
        owners = {t.identity.tenant for t in tenants}
        if len(owners) != 1:
            raise InputError("ScopedConnector: the ranks' tenant namespaces name %d tenants" % len(owners))
        self.scope = scopes[0]
        self.tenant = owners.pop()
        self.scope_connector = Connector(store, [s.namespace for s in scopes], **options)
        self.tenant_connector = Connector(store, tenants, **options)

    @property
    def may_read(self) -> bool:
        return self.scope.may_read(self.tenant)

    @property
    def may_publish(self) -> bool:
        return self.scope.may_publish(self.tenant)

    def block_hashes(self, tokens: Sequence[int], scope_tokens: int, *, salt: Any = None,
                     extras: Any = None) -> List[bytes]:
        """``scoped_block_hashes`` over the scope's and the tenant's first rank."""
        return scoped_block_hashes(self.scope_connector.ns, self.tenant_connector.ns, tokens, scope_tokens,
                                   salt=salt, extras=extras)

    @staticmethod
    def _split(block_hashes: Sequence[bytes], scope_blocks: int) -> int:
        if isinstance(scope_blocks, bool) or not isinstance(scope_blocks, int) or scope_blocks < 0:
            raise InputError("scope_blocks must be a non-negative int, not %r" % (scope_blocks,))
        if scope_blocks > len(block_hashes):
            raise InputError("scope_blocks is %d but the request has %d blocks" % (scope_blocks, len(block_hashes)))
        return scope_blocks

    def save(self, block_hashes: Sequence[bytes], scope_blocks: int, payloads: Sequence[Any], *,
             rank: int = 0) -> int:
        """Every block (one payload each): the number stored."""
        k = self._split(block_hashes, scope_blocks)
        if len(payloads) != len(block_hashes):
            raise InputError("save: %d blocks but %d payloads" % (len(block_hashes), len(payloads)))
        if k:
            self.scope.check_publish(self.tenant)
        n = self.scope_connector.save(block_hashes[:k], payloads[:k], rank=rank) if k else 0
        if k < len(block_hashes):
            n += self.tenant_connector.save(block_hashes[k:], payloads[k:], rank=rank)
        return n

    def save_private(self, block_hashes: Sequence[bytes], scope_blocks: int, private_payloads: Sequence[Any], *,
                     rank: int = 0) -> int:
        """Only the blocks after the scope (one payload each of those): the number stored."""
        k = self._split(block_hashes, scope_blocks)
        if len(private_payloads) != len(block_hashes) - k:
            raise InputError("save_private: %d private blocks but %d payloads"
                             % (len(block_hashes) - k, len(private_payloads)))
        return self.tenant_connector.save(block_hashes[k:], private_payloads, rank=rank) if private_payloads else 0

    def lookup(self, block_hashes: Sequence[bytes], scope_blocks: int) -> int:
        """The leading blocks whose headers verify on every rank: 0 when the scope part is
        not granted."""
        k = self._split(block_hashes, scope_blocks)
        n = 0
        if k:
            if not self.may_read:
                return 0
            n = self.scope_connector.lookup(block_hashes[:k])
            if n < k:
                return n
        return n + (self.tenant_connector.lookup(block_hashes[k:]) if k < len(block_hashes) else 0)

    def load(self, block_hashes: Sequence[bytes], scope_blocks: int, *, rank: int = 0) -> List[Optional[Any]]:
        """Per block, the verified payload or ``None`` (``kvkey.Connector.load``)."""
        k = self._split(block_hashes, scope_blocks)
        out: List[Optional[Any]] = []
        if k:
            out = list(self.scope_connector.load(block_hashes[:k], rank=rank)) if self.may_read else [None] * k
        if k < len(block_hashes):
            out += self.tenant_connector.load(block_hashes[k:], rank=rank)
        return out

    def load_into(self, block_hashes: Sequence[bytes], scope_blocks: int, buffers: Sequence[Any], *,
                  rank: int = 0) -> List[Any]:
        """``kvkey.Connector.load_into`` with one destination per block: per block a
        ``BlockResult``; the scope's blocks, when not granted, are ``missing`` with the
        verdict ``not_granted`` (``scope.readers``) and their buffers untouched."""
        from .connector import BlockResult

        k = self._split(block_hashes, scope_blocks)
        if len(buffers) != len(block_hashes):
            raise InputError("load_into: %d blocks but %d destinations" % (len(block_hashes), len(buffers)))
        out: List[Any] = []
        if k:
            if self.may_read:
                out = list(self.scope_connector.load_into(block_hashes[:k], buffers[:k], rank=rank))
            else:
                out = [BlockResult("missing", _scope_not_granted()) for _ in range(k)]
        if k < len(block_hashes):
            out += self.tenant_connector.load_into(block_hashes[k:], buffers[k:], rank=rank)
        return out

    def __repr__(self) -> str:
        return "ScopedConnector(scope=%r, tenant=%r)" % (self.scope.name, self.tenant)
