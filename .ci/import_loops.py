#!/usr/bin/env python3
"""Fails when a module imports, directly or through others, a module that imports it back.

Rust (the raylog crate under src/ and raylog-parsers under parsers/src/): the module tree
comes from `mod` declarations (with `#[path]`, inline `mod x { .. }` blocks are modules of
their own); an edge A -> B is a use of B's items from A's code: `use crate::…`,
`use super::…`, `use self::…`, a path such as `crate::a::b::f()` or `child::f()` in code,
or a path through a module name that a `use` brought in. Comments and string literals are
not code, so doc links never count.

How a parent and its children are treated:
- `mod child;` only places the child in the tree; it is not an edge.
- A child naming its parent's items (`super::Item`) is a child -> parent edge; a parent
  naming its child's items (`child::f()`, or a `use child::X` it then uses) is a
  parent -> child edge.
- `pub use child::X` that the parent does not use itself is a facade, not an edge: a path
  that names `parent::X` resolves to the child where X is defined.
- A loop that passes through the lowest module containing all its members is allowed:
  that is one room, whose mod.rs holds what its parts share and calls them (`checkpoint`
  and `checkpoint::disk`, `cli` and its commands, `formats` and its parsers). A loop
  whose members' lowest common parent is not on it (siblings using each other, modules
  of two rooms) is reported. `--strict` reports both.
- Test modules are ordinary nodes; nobody imports them, so they cannot close a loop.
- A name that is both a module and an item of its parent (`health::detect`): a `use` of
  it is an edge to the parent (and its paths through the module make their own edges); a
  path in code that ends at the module name is the parent's item.

Python (bench/, .ci/, tests/*/ and the other script folders): an edge A -> B is an
`import B` or `from B import …` (anywhere in A, lazy imports included) between scripts of
one folder.

Usage: .ci/import_loops.py [--edges] [--strict] [--root DIR]. Prints each loop found (per
strongly connected set, the shortest cycle through each edge that ties it, each edge with
the file:line that makes it) and exits 1 if there is any; `--edges` prints every
`module -> module` edge first, with where it is made.
"""

import argparse
import ast
import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
PATH_RE = re.compile(rf"(?<![A-Za-z0-9_:]){IDENT}(?:\s*::\s*{IDENT})+")
MOD_RE = re.compile(rf"\bmod\s+({IDENT})\s*([;{{])")
ITEM_RE = re.compile(rf"\b(?:fn|struct|enum|trait|type|const|static|union|macro_rules!)\s+({IDENT})")
RAW_STR_RE = re.compile(r'b?r(#*)"')
PATH_ATTR_RE = re.compile(r'#\[path\s*=\s*"([^"]+)"\]\s*(#\[[^\]]*\]\s*)*$')
USE_RE = re.compile(r"\b(pub(?:\s*\([^)]*\))?\s+)?use\s+([^;]*);")
RUST_CRATES = [("raylog", "src/lib.rs"), ("raylog_parsers", "parsers/src/lib.rs")]
PY_DIRS = ["bench", ".ci", "tests/live", "tests/otlp", "fixtures", "examples/compose"]


def strip_rust(src):
    """The source with comments, strings and char literals blanked (newlines kept)."""
    out, i, n = [], 0, len(src)

    def blank(s):
        return re.sub(r"[^\n]", " ", s)

    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(src[i:j]))
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(src[i:j]))
            i = j
        elif (m := RAW_STR_RE.match(src, i)) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            end = src.find('"' + m.group(1), m.end())
            j = n if end < 0 else end + 1 + len(m.group(1))
            out.append(blank(src[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append(blank(src[i : j + 1]))
            i = j + 1
        elif c == "'":
            m = re.compile(r"'(\\(u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'])'").match(src, i)
            if m:
                out.append(blank(m.group(0)))
                i = m.end()
            else:  # a lifetime
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parse_use_tree(text):
    """`a::{b, c::d as e, f::*}` -> [(segments, alias, glob)]."""
    text = re.sub(r"\s*(::|[{},])\s*", r"\1", re.sub(r"\s+", " ", text.strip()))
    out = []

    def walk(prefix, s):
        depth, start, parts = 0, 0, []
        for k, ch in enumerate(s):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(s[start:k])
                start = k + 1
        parts.append(s[start:])
        for part in filter(None, parts):
            brace = part.find("{")
            if brace >= 0:
                head = [x for x in part[:brace].split("::") if x]
                walk(prefix + head, part[brace + 1 : part.rindex("}")])
                continue
            alias = None
            if " as " in part:
                part, alias = part.split(" as ")
            segs = prefix + [x for x in part.split("::") if x]
            if segs and segs[-1] == "*":
                out.append((segs[:-1], None, True))
            elif segs and segs[-1] == "self":
                out.append((segs[:-1], alias, False))
            else:
                out.append((segs, alias, False))

    walk([], text)
    return out


class Module:
    """One module: a file, or an inline `mod x { .. }` (the span start..end of text)."""

    def __init__(self, path, file, text, start, end):
        self.path, self.file, self.text, self.start, self.end = path, file, text, start, end
        self.children = {}  # name -> full path
        self.reexports = {}  # name -> segments of the `pub use`
        self.uses = []  # (segments, alias, glob, pub, line)
        self.paths = []  # (segments, line)
        self.code = ""  # its own text without `use` items and attributes
        self.items = set()  # names it defines (fn, struct, …)


def matching_brace(text, i):
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(text)


class RustCrate:
    def __init__(self, root, crate, lib):
        self.root, self.crate, self.mods = root, crate, {}
        self.load((crate,), os.path.join(root, lib), True)
        self.edges = {}  # (a, b) -> "file:line"

    def load(self, path, file, owns_dir):
        """Reads the module `path` from `file` (a mod.rs or lib.rs owns its directory;
        x.rs puts its children in x/)."""
        with open(file, encoding="utf-8") as f:
            raw = f.read()
        base = os.path.dirname(file) if owns_dir else os.path.splitext(file)[0]
        self.scan(path, file, raw, strip_rust(raw), 0, len(raw), base)

    def scan(self, path, file, raw, text, start, end, base):
        mod = self.mods[path] = Module(path, file, text, start, end)
        pos = start
        while m := MOD_RE.search(text, pos, end):
            name, kind = m.group(1), m.group(2)
            child = path + (name,)
            mod.children[name] = child
            if kind == "{":
                close = matching_brace(text, m.end() - 1)
                self.scan(child, file, raw, text, m.end(), close, os.path.join(base, name))
                pos = close + 1
                continue
            pos = m.end()
            attr = PATH_ATTR_RE.search(raw[: m.start()])
            if attr:
                self.load(child, os.path.join(os.path.dirname(file), attr.group(1)), False)
                continue
            flat, nested = os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")
            self.load(child, flat if os.path.exists(flat) else nested, not os.path.exists(flat))

    def own_spans(self, mod):
        """The text ranges of `mod` minus its inline child modules."""
        inner = sorted(
            (c.start, c.end)
            for c in self.mods.values()
            if c.file == mod.file and c.start > mod.start and c.end <= mod.end and len(c.path) == len(mod.path) + 1
        )
        spans, at = [], mod.start
        for s, e in inner:
            spans.append((at, s))
            at = e + 1
        spans.append((at, mod.end))
        return spans

    def collect(self):
        for mod in self.mods.values():
            for s, e in self.own_spans(mod):
                chunk = mod.text[s:e]
                line0 = mod.text.count("\n", 0, s) + 1
                for m in USE_RE.finditer(chunk):
                    line = line0 + chunk.count("\n", 0, m.start())
                    for segs, alias, glob in parse_use_tree(m.group(2)):
                        mod.uses.append((segs, alias, glob, bool(m.group(1)), line))
                code = USE_RE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), chunk)
                code = re.sub(r"#!?\[[^\]]*\]", lambda m: re.sub(r"[^\n]", " ", m.group(0)), code)
                for m in PATH_RE.finditer(code):
                    segs = [x.strip() for x in m.group(0).split("::")]
                    mod.paths.append((segs, line0 + code.count("\n", 0, m.start())))
                mod.code += code
                mod.items.update(ITEM_RE.findall(code))
        for mod in self.mods.values():
            for segs, alias, glob, pub, line in mod.uses:
                if pub and not glob and segs:
                    mod.reexports[alias or segs[-1]] = segs

    def anchor(self, mod, first):
        """Where a path starting with `first` begins, seen from `mod`, or None (extern)."""
        if first == "crate":
            return (self.crate,)
        if first == "self":
            return mod.path
        if first == "super":
            return mod.path[:-1]
        if first in mod.children:
            return mod.children[first]
        for segs, alias, glob, pub, line in mod.uses:
            if not glob and segs and (alias or segs[-1]) == first:
                target = self.resolve(mod, segs, depth=1)
                if target and target[1] is None:
                    return target[0]
        return None

    def resolve(self, mod, segs, depth=0):
        """(module, item) that `segs` names from `mod`: the deepest module on the path, and
        the item after it (None when the path ends at a module); re-exports followed."""
        if depth > 8 or not segs:
            return None
        at, rest = self.anchor(mod, segs[0]), segs[1:]
        while at and rest and rest[0] == "super":
            at, rest = at[:-1], rest[1:]
        if at is None or at not in self.mods:
            return None
        while rest and at + (rest[0],) in self.mods:
            at, rest = at + (rest[0],), rest[1:]
        if not rest:
            return at, None
        target = self.mods[at]
        if rest[0] in target.reexports:
            inner = self.resolve(target, target.reexports[rest[0]], depth + 1)
            if inner:
                return inner
        return at, rest[0]

    def parent_defines(self, path):
        """Whether the parent of module `path` also defines an item of its name."""
        return len(path) > 1 and path[-1] in self.mods[path[:-1]].items

    def uses_itself(self, mod, name):
        return re.search(rf"(?<![A-Za-z0-9_:]){re.escape(name)}\b", mod.code) is not None

    def add(self, a, b, file, line):
        if b is not None and a != b:
            self.edges.setdefault((a, b), f"{os.path.relpath(file, self.root)}:{line}")

    def build(self):
        self.collect()
        for mod in self.mods.values():
            for segs, alias, glob, pub, line in mod.uses:
                got = self.resolve(mod, segs)
                if not got:
                    continue
                target, item = got
                if pub and not glob and not self.uses_itself(mod, alias or segs[-1]):
                    continue  # a facade: whoever names it is sent to `target`
                if item is None and not glob:
                    # A module brought in by name: its paths in code make the edges. A
                    # `use` takes every namespace, so an item of the module's name in
                    # its parent (`health::detect`, module and fn) comes along.
                    if self.parent_defines(target):
                        self.add(mod.path, target[:-1], mod.file, line)
                    continue
                self.add(mod.path, target, mod.file, line)
            for segs, line in mod.paths:
                got = self.resolve(mod, segs)
                if got and (got[1] is not None or len(segs) > 1):
                    # A path that ends at a module in code is the parent's item of
                    # that name: a module is not a value.
                    target = got[0][:-1] if got[1] is None and self.parent_defines(got[0]) else got[0]
                    self.add(mod.path, target, mod.file, line)
        return {(self.name(a), self.name(b)): w for (a, b), w in self.edges.items()}

    @staticmethod
    def name(path):
        return "::".join(path)


def python_edges(root):
    edges = {}
    for d in PY_DIRS:
        folder = os.path.join(root, d)
        if not os.path.isdir(folder):
            continue
        scripts = {f[:-3] for f in os.listdir(folder) if f.endswith(".py")}
        for s in sorted(scripts):
            file = os.path.join(folder, s + ".py")
            with open(file, encoding="utf-8") as f:
                tree = ast.parse(f.read(), file)
            for node in ast.walk(tree):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name.split(".")[0] for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names = [node.module.split(".")[0]]
                for n in names:
                    if n in scripts and n != s:
                        edges.setdefault((f"{d}/{s}.py", f"{d}/{n}.py"), f"{d}/{s}.py:{node.lineno}")
    return edges


def tree_path(node):
    return tuple(re.split(r"::|/", node))


def sccs(graph, nodes):
    """The strongly connected sets of more than one node of `graph` restricted to `nodes`
    (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in nodes:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                found.append(set(scc))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return found


def shortest_path(graph, within, src, dst):
    prev, frontier = {src: None}, [src]
    while frontier and dst not in prev:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w in within and w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    path, at = [], dst
    while at is not None:
        path.insert(0, at)
        at = prev[at]
    return path


def loops(edges, strict):
    """[(members, [cycle, …])]: each strongly connected set that is a loop, with the
    shortest cycle through each edge that crosses between subtrees.

    Without `strict`, a cycle that passes through the deepest module containing all its
    members (a parent and the children it calls and that use it back) is allowed: for each
    module T, only T's proper descendants are searched, and a set is a loop when it holds
    modules under two different children of T, which means some cycle among them has T as
    its lowest common ancestor and does not pass through T."""
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    if strict:
        tops = {(): set(graph)}
    else:
        tops = {}
        for v in graph:
            p = tree_path(v)
            for k in range(len(p)):
                tops.setdefault(p[:k], set()).add(v)
    found = []
    for top, nodes in sorted(tops.items()):
        under = {v: v if strict else tree_path(v)[len(top)] for v in nodes}
        for scc in sccs(graph, nodes):
            if len({under[v] for v in scc}) < 2:
                continue  # a loop inside one child: found (or allowed) at that child
            cyc, seen = [], set()
            for a, b in sorted((a, b) for a in scc for b in graph[a] if b in scc and under[a] != under[b]):
                cycle = [a] + shortest_path(graph, scc, b, a)[:-1]
                key = frozenset(zip(cycle, cycle[1:] + cycle[:1]))
                if key not in seen:
                    seen.add(key)
                    cyc.append(cycle)
            found.append((sorted(scc), cyc))
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--edges", action="store_true", help="print every module -> module edge")
    ap.add_argument("--strict", action="store_true",
                    help="also report loops that pass through their members' common parent")
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    edges = {}
    for crate, lib in RUST_CRATES:
        if os.path.exists(os.path.join(root, lib)):
            edges.update(RustCrate(root, crate, lib).build())
    edges.update(python_edges(root))
    if args.edges:
        for (a, b), where in sorted(edges.items()):
            print(f"{a} -> {b}    ({where})")
        print()
    found = loops(edges, args.strict)
    for members, cycs in found:
        print(f"import loop among {len(members)} modules: {', '.join(members)}")
        for cycle in sorted(cycs, key=len):
            print("  " + " -> ".join(cycle + cycle[:1]))
            for a, b in zip(cycle, cycle[1:] + cycle[:1]):
                print(f"      {a} -> {b}    ({edges[(a, b)]})")
    print(f"{len(edges)} edges, {len(found)} import loop(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
