"""Compatibility modules for the key schemes kvkey replaces (see kvkey.compat.lmdeploy)."""

from . import lmdeploy  # noqa: F401

__all__ = ["lmdeploy"]
