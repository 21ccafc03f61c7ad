#!/usr/bin/env python3
"""Rewrites the generated part of python/kvkey/__init__.pyi: the identity's classes
(Model, Quant, Kv, Shard, Adapter and Identity's members), whose text the built
module derives from the library's field table (kvkey._kvkey._identity_stub()).

Run with the built module importable, e.g.
    PYTHONPATH=build/dev/python python3 scripts/update-stub.py
python/tests/test_stubs.py fails while the committed stub differs.
"""

import pathlib
import sys

BEGIN = "# ---- generated from the field table (scripts/update-stub.py): do not edit ----\n"
END = "# ---- end of the generated part ----\n"
STUB = pathlib.Path(__file__).resolve().parent.parent / "python" / "kvkey" / "__init__.pyi"


def generated_region(text):
    """(start, end) offsets of the generated text between the markers."""
    start = text.index(BEGIN) + len(BEGIN)
    return start, text.index(END, start)


def main():
    from kvkey import _kvkey  # noqa: PLC0415 (needs the built module on sys.path)

    text = STUB.read_text()
    start, end = generated_region(text)
    fresh = _kvkey._identity_stub()
    if text[start:end] == fresh:
        print(f"{STUB}: up to date")
        return 0
    STUB.write_text(text[:start] + fresh + text[end:])
    print(f"{STUB}: rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
