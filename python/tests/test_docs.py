"""Every ```python block of docs/python.md, docs/integration/*.md and README.md runs as written.

A block runs on its own, in a fresh namespace and a temporary directory, unless an HTML
comment (invisible in the rendered page) on its own lines right before it says otherwise:

    <!-- doctest: continue -->       run in the namespace of the page's previous block
    <!-- doctest: setup              run this hidden code first, in the block's namespace
    fake = ...                       (fakes for the engine objects or stores a guide's
    -->                              snippet uses: no block needs a server)
    <!-- doctest: skip REASON -->    do not run the block (kept rare: each is listed below)

docs/python.md's "Docs that run" says the same for writers.
"""

import pathlib
import re
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# docs/integration/mooncake.md talks to a real Mooncake Store: python/tests/test_mooncake.py runs it.
PAGES = [ROOT / "docs" / "python.md", *sorted(p for p in (ROOT / "docs" / "integration").glob("*.md")
                                             if p.name != "mooncake.md"), ROOT / "README.md"]
TOKEN = re.compile(r"^[ \t]*<!--\s*doctest:\s*(?P<directive>.*?)-->"  # a directive on its own lines
                   r"|^(?P<indent>[ \t]*)```python\n(?P<code>.*?)^(?P=indent)```",  # a block, maybe in a list
                   re.S | re.M)
SKIPS_ALLOWED = 1  # per page


def blocks(page):
    """[(index, code, setup, continues, skip reason or None)] of a page, in order."""
    out, setup, continues, skip = [], [], False, None
    for m in TOKEN.finditer(page.read_text()):
        if m.group("directive") is not None:
            d = m.group("directive").strip()
            if d.startswith("setup"):
                setup.append(textwrap.dedent(d[len("setup"):].strip("\n")) + "\n")
            elif d == "continue":
                continues = True
            elif d.startswith("skip"):
                skip = d[len("skip"):].strip() or "no reason given"
            else:
                raise AssertionError(f"{page.name}: unknown doctest directive {d!r}")
            continue
        out.append((len(out), textwrap.dedent(m.group("code")), "".join(setup), continues, skip))
        setup, continues, skip = [], False, None
    return out


def test_every_page_has_python_blocks_and_few_skips():
    for page in PAGES:
        found = blocks(page)
        assert found, f"{page.name}: no python blocks"
        skipped = [b for b in found if b[4]]
        assert len(skipped) <= SKIPS_ALLOWED, f"{page.name}: {len(skipped)} blocks skipped"
    assert len(blocks(PAGES[0])) >= 8


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_blocks_run(page, tmp_path, monkeypatch):
    run_page(page, tmp_path, monkeypatch)


def run_page(page, tmp_path, monkeypatch):
    """The page's blocks in order: each in its own namespace unless it continues the last."""
    monkeypatch.chdir(tmp_path)
    namespace = None
    ran = 0
    for index, code, setup, continues, skip in blocks(page):
        if skip:
            continue
        if not continues or namespace is None:
            namespace = {"__name__": "__docs__"}
        where = f"{page.relative_to(ROOT)}: python block {index}"
        if setup:
            exec(compile(setup, f"{where} (setup)", "exec"), namespace)
        try:
            exec(compile(code, where, "exec"), namespace)
        except Exception as e:
            raise AssertionError(f"{where} failed: {type(e).__name__}: {e}\n{code}") from e
        ran += 1
    assert ran
