"""Shared scopes (format v4, docs/format.md section 12): a prefix that several tenants
share on purpose, stored once in the scope's namespace (tenant ``_scope.<name>``), read
only by the tenants it grants and written only by its publishers; the blocks after it
continue in the tenant's own namespace, their hashes bound to the transition.

    scope = kvkey.SharedScope("support-bot", identity, readers=["acme"], publishers=["globex"])
    tenant = kvkey.KeyNamespace(identity, secret=secret)
    blocks = kvkey.scoped_block_hashes(scope.namespace, tenant, tokens, scope_tokens=128)

The serving side says how many tokens belong to the scope, never the prompt's text.
"""

from ._kvkey import InputError, KeyNamespace, ScopeError, _scope_not_granted

__all__ = ["SharedScope", "scoped_block_hashes"]


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
