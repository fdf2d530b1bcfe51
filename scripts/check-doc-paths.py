#!/usr/bin/env python3
"""Checks that the files the docs name exist: every `code span` or relative Markdown link
in README.md and docs/*.md that looks like a path of the repository (it starts with
crates/, src/, tests/, examples/, scripts/, docs/, .ci/, or ends in .rs, .cu, .py, .sh,
.toml or .md) must name a file or folder of the tree. A short path (`read/pieces.rs`,
`ops/device/mod.rs`) may be the tail of one. CHANGELOG.md and docs/performance-history.md
are records of their day and are not checked.

    python3 scripts/check-doc-paths.py
"""

import glob
import os
import re
import subprocess
import sys

ROOTS = ("crates/", "src/", "tests/", "examples/", "scripts/", "docs/", ".ci/")
SUFFIXES = (".rs", ".cu", ".py", ".sh", ".toml", ".md")
SPAN = re.compile(r"`([A-Za-z0-9_.\-/]+)`|\]\(([^)#\s]+)(?:#[^)]*)?\)")


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"], check=True, stdout=subprocess.PIPE, text=True
    ).stdout.split()
    names = set(tracked)
    for path in tracked:  # every folder too
        parts = path.split("/")
        for i in range(1, len(parts)):
            names.add("/".join(parts[:i]))
    docs = ["README.md"] + sorted(
        p for p in glob.glob("docs/*.md") if p != "docs/performance-history.md"
    )
    missing = []
    for doc in docs:
        with open(doc, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                for m in SPAN.finditer(line):
                    token = (m.group(1) or m.group(2)).rstrip("/")
                    if "://" in token or token.startswith("mailto:") or not token:
                        continue
                    if not (token.startswith(ROOTS) or token.endswith(SUFFIXES)):
                        continue
                    if token in SUFFIXES:  # `.cu`: a kind of file, not a file
                        continue
                    if m.group(2) or "/" not in token and token.endswith(".md"):
                        # A link (or a doc's name) is relative to the doc's folder.
                        token = os.path.normpath(os.path.join(os.path.dirname(doc), token))
                    if token in names:
                        continue
                    if not token.startswith(ROOTS) and any(
                        n == token or n.endswith("/" + token) for n in names
                    ):
                        continue
                    missing.append(f"{doc}:{number}: {token}")
    if missing:
        print("the docs name paths that do not exist:", file=sys.stderr)
        for m in missing:
            print(f"  {m}", file=sys.stderr)
        sys.exit(1)
    print(f"every path the docs name exists ({len(docs)} files)")


if __name__ == "__main__":
    main()
