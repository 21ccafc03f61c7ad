"""The Python package's import graph: no module imports one that imports it back (the
package's __init__, which re-exports everything, aside), and the stores are one module
each, every name still reachable as kvkey.stores.X."""

import ast
import os
import pathlib
import subprocess
import sys

import kvkey
import kvkey.stores

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "kvkey"


def module_name(path):
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path, modules):
    """The kvkey modules `path` imports at its top level or in its functions."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:  # `from . import stores` imports the submodule
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in modules else target)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m in modules and m != name}


def graph():
    paths = [p for p in PACKAGE.rglob("*.py")]
    modules = {module_name(p) for p in paths} | {"kvkey._kvkey"}
    return {module_name(p): imports_of(p, modules) for p in paths}


def cycles(edges, skip):
    """Every module that lies on an import cycle whose modules are not in `skip`."""
    found = set()
    for start in edges:
        if start in skip:
            continue
        stack, seen = [start], set()
        while stack:
            m = stack.pop()
            for n in edges.get(m, ()):
                if n in skip:
                    continue
                if n == start:
                    found.add(start)
                elif n not in seen:
                    seen.add(n)
                    stack.append(n)
    return found


def test_no_import_cycles_between_the_modules():
    edges = graph()
    assert "kvkey.stores.mooncake" in edges and "kvkey.connector" in edges
    assert cycles(edges, skip={"kvkey"}) == set()
    # the connector and the stores need only the store protocol of kvkey.stores
    assert edges["kvkey.connector"] & {m for m in edges if m.startswith("kvkey.stores")} == {"kvkey.stores.protocol"}
    for m, deps in edges.items():
        if m.startswith("kvkey.stores"):
            assert "kvkey.connector" not in deps and "kvkey.aio" not in deps, m
            assert "kvkey" not in deps, f"{m} imports the kvkey package"


def test_the_stores_are_one_module_each_and_keep_their_names():
    from kvkey.stores import memory, protocol, redis, redis_cluster

    assert kvkey.stores.MemoryStore is memory.MemoryStore
    assert kvkey.stores.RedisStore is redis.RedisStore
    assert kvkey.stores.RedisClusterStore is redis_cluster.RedisClusterStore
    for name in ("Store", "StoreError", "Prefix", "Replies", "glob_escape"):
        assert getattr(kvkey.stores, name) is getattr(protocol, name)
    assert kvkey.stores.MooncakeStore.__module__ == "kvkey.stores.mooncake"
    assert sorted(kvkey.stores.__all__) == sorted(
        ["MemoryStore", "MooncakeStore", "Prefix", "RedisClusterStore", "RedisStore", "Replies", "Store", "StoreError",
         "glob_escape"])
    for p in (PACKAGE / "stores").glob("*.py"):
        assert len(p.read_text().splitlines()) < 700, f"{p.name} keeps more than one store"


def test_each_module_imports_on_its_own():
    for m in ("kvkey.connector", "kvkey.aio", "kvkey.stores.mooncake", "kvkey.stores.aio", "kvkey.stores.protocol",
              "kvkey.stores.redis_cluster"):
        env = dict(os.environ, PYTHONPATH=str(pathlib.Path(kvkey.__file__).parents[1]))
        out = subprocess.run([sys.executable, "-c", f"import {m}"], capture_output=True, text=True, env=env)
        assert out.returncode == 0, f"import {m}: {out.stderr}"
