#!/usr/bin/env python3
"""Every relative link of README.md and docs/*.md names a file that exists, and every
`#anchor` a heading of its target (GitHub's anchors: lowercased, punctuation dropped,
spaces as hyphens, `-1`, `-2` for repeats).

    python3 .ci/check_doc_links.py [FILE.md]...

Links inside fenced code blocks and inline code are ignored; http(s) and mailto links
are not fetched. Prints each broken link as `file:line: target (reason)` and exits 1
if there is one.

Standard library only.
"""

import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose(text):
    """The text with fenced code blocks and inline code blanked (line numbers kept)."""
    out, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else re.sub(r"`[^`]*`", lambda m: "`" + "x" * (len(m.group(0)) - 2) + "`", line))
    return "\n".join(out)


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", s)  # a link in a heading keeps its text
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    seen, found = {}, set()
    fenced = False
    for line in open(path, encoding="utf-8").read().split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else "%s-%d" % (base, n))
    for m in re.finditer(r'<a\s+(?:name|id)="([^"]+)"', open(path, encoding="utf-8").read()):
        found.add(m.group(1))
    return found


def check(path):
    bad = []
    text = prose(open(path, encoding="utf-8").read())
    for m in LINK.finditer(text):
        target = m.group(1)
        line = text.count("\n", 0, m.start()) + 1
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not os.path.exists(dest):
            bad.append((path, line, target, "no such file"))
            continue
        if anchor and dest.endswith(".md") and anchor not in anchors(dest):
            bad.append((path, line, target, "no such heading"))
    return bad


def main():
    files = sys.argv[1:] or [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    bad = [b for f in files for b in check(f)]
    for path, line, target, why in bad:
        print("%s:%d: %s (%s)" % (os.path.relpath(path, ROOT), line, target, why))
    print("%d files, %d broken links" % (len(files), len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
