"""The type stubs (kvkey/*.pyi) declare exactly the runtime's public names."""

import ast
import inspect
import pathlib

import pytest

import kvkey
from kvkey.compat import lmdeploy

STUBS = pathlib.Path(__file__).resolve().parent.parent / "kvkey"


def declared(stub):
    """{name: set of member names (None for a non-class)} of a .pyi file's top level."""
    out = {}
    for node in ast.parse(stub.read_text()).body:
        if isinstance(node, ast.ClassDef):
            members = set()
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    members.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    members.add(item.target.id)
            out[node.name] = members
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = None
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = None
        elif isinstance(node, ast.ImportFrom):  # explicit re-exports: `from .x import Y as Y`
            out.update({a.name: None for a in node.names if a.asname == a.name})
    return out


def public(cls):
    own = set()
    for name, _ in inspect.getmembers(cls):
        if not name.startswith("_"):
            own.add(name)
    return own


@pytest.mark.parametrize("module,stub", [(kvkey, STUBS / "__init__.pyi"), (lmdeploy, STUBS / "compat" / "lmdeploy.pyi")])
def test_stubs_match_the_runtime(module, stub):
    names = declared(stub)
    runtime = {n for n in module.__all__ if n != "compat"}
    assert runtime <= set(names) | {"compat"}, f"missing from {stub.name}: {runtime - set(names)}"
    for name in runtime:
        obj = getattr(module, name)
        if inspect.isclass(obj) and not issubclass(obj, BaseException) and names[name] is not None:
            if obj is kvkey.KvDtype:
                assert {m for m in obj.__members__} <= names[name]
                continue
            assert public(obj) <= names[name], f"{name}: {public(obj) - names[name]} not in the stub"
            assert {n for n in names[name] if not n.startswith("_")} <= public(obj) | {"field"}, name


def test_the_package_is_marked_typed():
    assert (STUBS / "py.typed").is_file()
