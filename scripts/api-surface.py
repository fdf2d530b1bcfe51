#!/usr/bin/env python3
"""Counts devbuf's real public surface from the sources, without cargo (issue 29).

An item counts when a user can name it: it is reachable from a crate's root through
`pub mod`s and `pub use`s (re-exports from the other workspace crates included), and
it is not inside a `#[cfg(test)]` item. Each item is counted once, in the crate that
defines it, whatever the number of paths that reach it. Inherent `pub fn`s count when
their type is reachable; trait methods when their trait is.

Classes: `api` (what rustdoc shows), `hidden` (`#[doc(hidden)]` on the item, its
module or its re-export) and `test-support` (`cfg(feature = "test-support")`). An item
reached by several paths takes the most public one.

    M = free fns + inherent methods + types (struct/enum/union/trait/type alias), api only

Trait methods and consts are printed beside M, not in it. `#[cfg(feature = ...)]`
items count as present (all features on, as docs.rs shows the crates).

    python3 scripts/api-surface.py            # per-crate counts
    python3 scripts/api-surface.py --list     # every counted item, with its paths
    python3 scripts/api-surface.py --dup-paths  # api items a user can name two ways
    python3 scripts/api-surface.py --budget N # exit 1 when M exceeds N

Known limits (cross-check with rustdoc's JSON output when in doubt): methods that
`macro_rules!` generate are not seen (a warning names any macro that writes `pub fn`);
an impl's self type is resolved through the impl's module, falling back to the name.
"""
import argparse
import collections
import os
import re
import sys

# --- lexing -------------------------------------------------------------------------


def strip(src):
    """Removes comments; string literals keep only [A-Za-z0-9_ .-] (so that
    `feature = "test-support"` stays readable and no brace or quote is left inside);
    char literals become `' '`."""
    out = []
    i = 0
    n = len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
            continue
        if src.startswith("/*", i):
            d = 1
            i += 2
            while i < n and d:
                if src.startswith("/*", i):
                    d += 1
                    i += 2
                elif src.startswith("*/", i):
                    d -= 1
                    i += 2
                else:
                    i += 1
            continue
        prev_ident = i > 0 and (src[i - 1].isalnum() or src[i - 1] == "_")
        m = re.match(r'(?:b|c)?r(#*)"', src[i : i + 300])
        if m and not prev_ident:
            end = '"' + m.group(1)
            j = src.find(end, i + len(m.group(0)))
            j = n if j < 0 else j
            body = re.sub(r"[^A-Za-z0-9_ .-]", "_", src[i + len(m.group(0)) : j])
            out.append('"' + body + '"')
            i = j + len(end)
            continue
        if c == '"' or (c in "bc" and src.startswith(c + '"', i) and not prev_ident):
            if c != '"':
                i += 1
            i += 1
            st = i
            while i < n and src[i] != '"':
                i += 2 if src[i] == "\\" else 1
            body = re.sub(r"[^A-Za-z0-9_ .-]", "_", src[st:i])
            i += 1
            out.append('"' + body + '"')
            continue
        if c == "'":
            m = re.match(r"'(\\[^']{1,10}|[^\\'])'", src[i : i + 14])
            if m:
                out.append("' '")
                i += len(m.group(0))
                continue
        out.append(c)
        i += 1
    return "".join(out)


OPEN = "([{"
CLOSE = ")]}"


def match_close(t, i):
    """index of the bracket closing t[i]"""
    d = 0
    for j in range(i, len(t)):
        if t[j] in OPEN:
            d += 1
        elif t[j] in CLOSE:
            d -= 1
            if d == 0:
                return j
    return len(t) - 1


ASSIGNED = re.compile(
    r"^(\s*#!?\[[^\]]*\])*\s*(pub(\s*\([^)]*\))?\s+)?"
    r"((const|static)\s+(mut\s+)?(\w+|_)\s*:|type\s+\w+[^;{]*=)"
)
USE = re.compile(r"^(\s*#!?\[[^\]]*\])*\s*(pub(\s*\([^)]*\))?\s+)?use\b")


def headers(t, start, end):
    """Items of the block t[start:end]: yields (header, ';' or '{', body_start, body_end)."""
    i = start
    while i < end:
        while i < end and t[i] in " \t\r\n;":
            i += 1
        if i >= end:
            break
        if t[i] in CLOSE:  # stray closer: should not happen
            i += 1
            continue
        j = i
        while j < end:
            c = t[j]
            if c == "{":
                # a body, unless it is part of a `use` tree or of an initializer
                if USE.match(t[i:j]) or ASSIGNED.match(t[i:j]):
                    j = match_close(t, j) + 1
                    continue
                break
            if c in "([":
                j = match_close(t, j) + 1
                continue
            if c == ";":
                break
            j += 1
        if j >= end:
            break
        hdr = t[i:j]
        if t[j] == ";":
            yield hdr, ";", None, None
            i = j + 1
        else:
            k = match_close(t, j)
            yield hdr, "{", j + 1, k
            i = k + 1


def split_attrs(h):
    attrs = []
    h = h.strip()
    while re.match(r"#!?\[", h):
        k0 = h.index("[")
        k = match_close(h, k0)
        attrs.append(h[k0 + 1 : k])
        h = h[k + 1 :].strip()
    return attrs, h


def flags_of(attrs):
    """'test' (compiled only for tests), 'ts' (feature test-support), 'hidden'."""
    f = set()
    for a in attrs:
        a2 = re.sub(r"\s+", "", a)
        if a2.startswith("cfg("):
            # drop negated parts: cfg(not(test)) and cfg(not(feature="test-support")) are
            # present in ordinary builds
            pos = re.sub(r"not\([^()]*\)", "", a2)
            if pos in ("cfg(test)", "cfg(doctest)") or pos.startswith("cfg(all(test,"):
                f.add("test")
            if '"test-support"' in pos:
                f.add("ts")
        if a2.startswith("doc(hidden"):
            f.add("hidden")
        if a2.startswith("cfg_attr(") and a2.endswith(",doc(hidden))") and "test-support" in a2:
            f.add("hidden")
    return f


def vis_of(h):
    if re.match(r"pub\s*\(", h):
        return "restricted"
    if re.match(r"pub\b", h):
        return "pub"
    return "priv"


def typename(s):
    s = s.strip()
    s = re.sub(r"^&\s*('\w+\s*)?(mut\s+)?", "", s)
    s = re.sub(r"<.*$", "", s, flags=re.S).strip()
    return s.split("::")


# --- module tree --------------------------------------------------------------------


class Mod:
    def __init__(self, crate, path, file, flags):
        self.crate = crate
        self.path = path
        self.file = file  # the file whose directory `mod x;` resolves against
        self.flags = flags
        self.children = {}
        self.vis = {}
        self.items = []
        self.uses = []  # (vis, tree, flags)
        self.impls = []  # (self type segs, trait or None, [(kind, name, vis, flags)], flags)
        self.parent = None


MACROS_WITH_PUB_FN = []


def mod_files(file, name, attrs):
    d = os.path.dirname(file)
    for a in attrs:
        m = re.match(r'path\s*=\s*"(.*)"$', a.strip())
        if m:
            return [os.path.join(d, m.group(1))]
    base = os.path.basename(file)
    if base in ("lib.rs", "mod.rs", "main.rs"):
        sd = d
    else:
        sd = os.path.join(d, base[:-3])
    return [os.path.join(sd, name + ".rs"), os.path.join(sd, name, "mod.rs")]


def parse_file(M, file):
    text = strip(open(file, encoding="utf-8").read())
    parse_block(M, file, text, 0, len(text))


def parse_block(M, file, t, a, b):
    for hdr, kind, bs, be in headers(t, a, b):
        attrs, h = split_attrs(hdr)
        if not h:
            continue  # inner attributes
        f = set(M.flags) | flags_of(attrs)
        if "test" in f:
            continue
        h1 = re.sub(r"\s+", " ", h)
        v = vis_of(h1)
        body = re.sub(r"^pub(\s*\([^)]*\))?\s*", "", h1)
        m = re.match(r"(?:unsafe )?mod (\w+)$", body)
        if m:
            name = m.group(1)
            child = Mod(M.crate, M.path + [name], file, f)
            child.parent = M
            M.children[name] = child
            M.vis[name] = v
            if kind == ";":
                for c in mod_files(file, name, attrs):
                    if os.path.exists(c):
                        child.file = c
                        parse_file(child, c)
                        break
                else:
                    print(f"api-surface: no file for `mod {name};` in {file}", file=sys.stderr)
            else:
                # `mod x;` inside an inline module resolves below <dir of file>/x/
                d = os.path.dirname(file)
                base = os.path.basename(file)
                sub = d if base in ("lib.rs", "mod.rs", "main.rs") else os.path.join(d, base[:-3])
                child.file = os.path.join(sub, name, "mod.rs")
                parse_block(child, child.file, t, bs, be)
                child.file = file
            continue
        m = re.match(r"use (.*)$", body, re.S)
        if m:
            M.uses.append((v, m.group(1).strip(), f))
            continue
        m = re.match(r"(?:unsafe )?impl\b(.*)$", body, re.S)
        if m and kind == "{":
            rest = m.group(1).strip()
            if rest.startswith("<"):
                d = 0
                for k, c in enumerate(rest):
                    if c == "<":
                        d += 1
                    elif c == ">":
                        d -= 1
                        if d == 0:
                            break
                rest = rest[k + 1 :].strip()
            rest = re.split(r"\bwhere\b", rest)[0].strip()
            tr = None
            mm = re.match(r"(.*?)\s+for\s+(.*)$", rest)
            if mm and not mm.group(1).endswith("dyn"):
                tr = mm.group(1).strip()
                self_t = typename(mm.group(2))
            else:
                self_t = typename(rest)
            members = []
            for h2, _, _, _ in headers(t, bs, be):
                at2, hh = split_attrs(h2)
                f2 = flags_of(at2)
                if "test" in f2:
                    continue
                hh = re.sub(r"\s+", " ", hh)
                mf = re.match(r'(pub(?:\s*\([^)]*\))?\s+)?((?:default |const |async |unsafe |extern "\w*" )*)fn (\w+)', hh)
                vv = "trait" if tr else vis_of(hh)
                if mf:
                    members.append(("fn", mf.group(3), vv, f2))
                mc = re.match(r"(pub(?:\s*\([^)]*\))?\s+)?const (\w+)\s*:", hh)
                if mc:
                    members.append(("const", mc.group(2), vv, f2))
            M.impls.append((self_t, tr, members, f))
            continue
        body2 = re.sub(r'^((unsafe|async|const|extern "\w*"|default) )*(?=fn\b)', "", body)
        m = re.match(r"(struct|enum|union|trait|type|const|static|fn|macro_rules!) ?(?:mut )?(\w+)", body2)
        if not m:
            m = re.match(r"(?:unsafe |auto )*(trait) (\w+)", body)
        if m:
            k, name = m.group(1), m.group(2)
            it = {"kind": k, "name": name, "vis": v, "flags": f, "file": file, "mod": M, "crate": M.crate}
            if k == "trait" and kind == "{":
                tfns = []
                for h2, _, _, _ in headers(t, bs, be):
                    at2, hh = split_attrs(h2)
                    f2 = flags_of(at2)
                    if "test" in f2:
                        continue
                    mf = re.search(r"\bfn (\w+)", hh)
                    if mf:
                        tfns.append((mf.group(1), f2))
                it["methods"] = tfns
            if k == "macro_rules!" and kind == "{" and re.search(r"\bpub (const )?fn\b", t[bs:be]):
                MACROS_WITH_PUB_FN.append(f"{file}: macro_rules! {name}")
            M.items.append(it)


def expand_use(s):
    """`a::{b, c::{d as e}}` -> ['a::b', 'a::c::d@e']"""
    s = re.sub(r"\s+as\s+", "@", s.strip())
    s = re.sub(r"\s+", "", s)
    out = []

    def rec(prefix, s):
        k = s.find("{")
        if k >= 0 and s.endswith("}"):
            pre = s[:k]
            inner = s[k + 1 : -1]
            parts, d, cur = [], 0, ""
            for c in inner:
                if c == "{":
                    d += 1
                if c == "}":
                    d -= 1
                if c == "," and d == 0:
                    parts.append(cur)
                    cur = ""
                else:
                    cur += c
            if cur:
                parts.append(cur)
            for p in parts:
                rec(prefix + pre, p)
        else:
            out.append(prefix + s)

    rec("", s)
    res = []
    for p in out:
        tgt, _, alias = p.partition("@")
        segs = [x for x in tgt.split("::")]
        if segs and segs[0] == "":
            segs = segs[1:]  # `::crate_name::...`
        if len(segs) > 1 and segs[-1] == "self":
            segs = segs[:-1]
            name = alias or segs[-1]
            res.append((segs, name, True))
        else:
            res.append((segs, alias or segs[-1], False))
    return res


def walk(M):
    yield M
    for c in M.children.values():
        yield from walk(c)


CRATES = {}


class Crate:
    def __init__(self, name, root_file, externs=None):
        self.name = name
        CRATES[name] = self
        self.externs = externs or {}
        self.root = Mod(name, [], root_file, set())
        parse_file(self.root, root_file)

    def parent(self, m):
        return m.parent or m

    def find_mod(self, cur, segs, seen=None):
        """Follows the module prefix of segs from cur: (Mod or None for an extern
        path, remaining segs)."""
        m = cur
        i = 0
        if segs and segs[0] == "crate":
            m, i = self.root, 1
        elif segs and segs[0] == "self":
            i = 1
        elif segs and segs[0] == "super":
            pass
        elif segs and segs[0] not in m.children:
            # a name brought in by `use` (e.g. `use crate::a; pub use a::b::C;`)
            found = [x for k, x in self.lookup(m, segs[0], seen) if k == "mod"]
            if not found:
                return None, segs
            m, i = found[0], 1
        while i < len(segs) and segs[i] == "super":
            m = self.parent(m)
            i += 1
        while i < len(segs) - 0 and segs[i] in m.children:
            m = m.children[segs[i]]
            i += 1
        return m, segs[i:]

    def lookup(self, mod, name, seen=None):
        """[('item', it) | ('mod', Mod) | ('ext', path)] that `name` means in mod."""
        if mod.crate != self.name:
            return CRATES[mod.crate].lookup(mod, name, seen)
        seen = set(seen or ())
        key = (id(mod), name)
        if key in seen:
            return []
        seen.add(key)
        res = [("item", it) for it in mod.items if it["name"] == name]
        if name in mod.children:
            res.append(("mod", mod.children[name]))
        for _v, u, _f in mod.uses:
            for segs, alias, is_self in expand_use(u):
                if segs[-1] == "*":
                    if not is_self:
                        res += [r for r in self.resolve(mod, segs[:-1] + [name], seen) if r[0] != "ext"]
                elif alias == name:
                    res += self.resolve(mod, segs, seen, is_self)
        return res

    def resolve(self, mod, segs, seen=None, want_mod=False):
        if mod.crate != self.name:
            return CRATES[mod.crate].resolve(mod, segs, seen, want_mod)
        if segs[0] in self.externs:
            ext = self.externs[segs[0]]
            if len(segs) == 1:
                return [("mod", ext.root)]
            return ext.resolve(ext.root, ["crate"] + segs[1:], None, want_mod)
        if len(segs) == 1 and segs[0] in ("crate", "self", "super"):
            m, rest = self.find_mod(mod, segs + ["_"])
            return [("mod", m)]
        m, rest = self.find_mod(mod, segs[:-1], seen)
        if m is None or rest:
            return [("ext", "::".join(segs))]
        r = self.lookup(m, segs[-1], seen)
        if want_mod:
            r = [x for x in r if x[0] == "mod"]
        return r or [("ext", "::".join(segs))]


# --- reachability -------------------------------------------------------------------

RANK = {"api": 0, "hidden": 1, "test-support": 2}


def cls(fl):
    if "ts" in fl:
        return "test-support"
    if "hidden" in fl:
        return "hidden"
    return "api"


def reach(cr):
    """Public items reachable from cr's root: {id(item): (item, {path: class})}, and
    the modules reached {id(mod): (mod, {path: class})}, and extern re-exports."""
    items = {}
    mods = {}
    exts = []
    todo = [(cr.root, cr.name, frozenset(), (id(cr.root),))]
    while todo:
        M, pth, fl, chain = todo.pop()
        fl = frozenset(fl | M.flags)
        e = mods.setdefault(id(M), (M, {}))
        if pth in e[1]:
            continue
        e[1][pth] = cls(fl)
        if len(e[1]) > 20:
            continue
        for it in M.items:
            if it["vis"] == "pub":
                items.setdefault(id(it), (it, {}))[1][pth + "::" + it["name"]] = cls(fl | it["flags"])
        for n, c in M.children.items():
            if M.vis[n] == "pub" and id(c) not in chain:
                todo.append((c, pth + "::" + n, fl, chain + (id(c),)))
        for v, u, f in M.uses:
            if v != "pub":
                continue
            for segs, alias, is_self in expand_use(u):
                if segs[-1] == "*":
                    r = cr.resolve(M, segs[:-1], want_mod=True)
                    for kind, x in r:
                        if kind == "mod" and id(x) not in chain:
                            # a glob re-export: the module's public names appear here
                            todo.append((x, pth, fl | f, chain + (id(x),)))
                        elif kind == "ext":
                            exts.append((pth, "::".join(segs)))
                    continue
                for kind, x in cr.resolve(M, segs, want_mod=is_self):
                    p2 = pth + "::" + alias
                    if kind == "item":
                        items.setdefault(id(x), (x, {}))[1][p2] = cls(fl | f | x["flags"])
                    elif kind == "mod":
                        if id(x) not in chain:
                            todo.append((x, p2, fl | f, chain + (id(x),)))
                    else:
                        exts.append((p2, x))
    return items, mods, exts


def worse(a, b):
    return a if RANK[a] >= RANK[b] else b


def pick(paths, it):
    """the path to print: the most public, in the defining crate, shortest"""
    return min(paths, key=lambda x: (RANK[paths[x]], not x.startswith(it["crate"] + "::"), len(x), x))


def best(paths):
    return min(paths.values(), key=lambda c: RANK[c])


def surface(crates):
    """{crate name: {category: [(path, class, item)]}}, counted in the defining crate."""
    all_items = {}
    all_mods = {}
    exts = collections.defaultdict(list)
    for cr in crates:
        items, mods, ex = reach(cr)
        for k, (it, paths) in items.items():
            all_items.setdefault(k, (it, {}))[1].update(paths)
        for k, (m, paths) in mods.items():
            all_mods.setdefault(k, (m, {}))[1].update(paths)
        exts[cr.name] += ex
    by_id = {k: v for k, v in all_items.items()}
    out = {cr.name: collections.defaultdict(list) for cr in crates}
    for it, paths in by_id.values():
        c = best(paths)
        p = pick(paths, it)
        k = it["kind"]
        cat = {"struct": "types", "enum": "types", "union": "types", "trait": "types", "type": "types", "fn": "fns", "const": "consts", "static": "consts"}.get(k)
        if cat is None:
            continue
        out[it["crate"]][cat].append((p, c, it, paths))
        if k == "trait":
            for mname, f2 in it.get("methods", []):
                out[it["crate"]]["trait_methods"].append((p + "::" + mname, worse(c, cls(f2)), it, {}))
    # inherent methods: impl blocks of every crate whose self type is a reachable type
    for cr in crates:
        for M in walk(cr.root):
            for self_t, tr, members, fl in M.impls:
                if tr:
                    continue
                r = [x for kind, x in cr.resolve(M, self_t) if kind == "item" and x["kind"] in ("struct", "enum", "union", "type", "trait")]
                if not r:
                    r = [it for it, _ in by_id.values() if it["name"] == self_t[-1] and it["crate"] == cr.name]
                for ty in r:
                    if id(ty) not in by_id:
                        continue
                    _, paths = by_id[id(ty)]
                    tc = best(paths)
                    tp = pick(paths, ty)
                    for kind, name, v, f in members:
                        if v != "pub":
                            continue
                        mc = worse(tc, cls(fl | f))
                        cat = "methods" if kind == "fn" else "assoc_consts"
                        out[ty["crate"]][cat].append((tp + "::" + name, mc, ty, {}))
                    break
    return out, all_mods, exts


CATS = ("fns", "methods", "types", "trait_methods", "consts", "assoc_consts")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--list", action="store_true", help="print every counted item and its paths")
    ap.add_argument("--dup-paths", action="store_true", help="print the api items that have more than one api path (facade paths)")
    ap.add_argument("--budget", type=int, help="exit 1 when M (all crates) exceeds it")
    a = ap.parse_args()
    c = lambda n: os.path.join(a.root, "crates", n, "src", "lib.rs")
    core = Crate("devbuf_core", c("devbuf-core"))
    zarr = Crate("devbuf_zarr", c("devbuf-zarr"), {"devbuf_core": core})
    flight = Crate("devbuf_flight", c("devbuf-flight"), {"devbuf_core": core, "devbuf_zarr": zarr})
    facade = Crate("devbuf", os.path.join(a.root, "src", "lib.rs"), {"devbuf_core": core, "devbuf_zarr": zarr, "devbuf_flight": flight})
    crates = [core, zarr, flight, facade]
    out, mods, exts = surface(crates)
    for w in MACROS_WITH_PUB_FN:
        print(f"api-surface: warning: methods written by a macro are not counted: {w}", file=sys.stderr)
    total = 0
    print(f"{'crate':14} {'fns':>4} {'methods':>8} {'types':>6} {'M':>5} | {'trait_methods':>13} {'consts':>6} {'assoc_consts':>12} | {'hidden':>6} {'test-support':>12}")
    for cr in crates:
        s = out[cr.name]
        k = {x: collections.Counter(i[1] for i in s[x]) for x in CATS}
        m = k["fns"]["api"] + k["methods"]["api"] + k["types"]["api"]
        total += m
        hid = sum(k[x]["hidden"] for x in ("fns", "methods", "types"))
        ts = sum(k[x]["test-support"] for x in ("fns", "methods", "types"))
        name = cr.name.replace("_", "-")
        if cr is facade and m == 0 and hid == 0 and ts == 0:
            print(f"{name:14} (defines nothing; re-exports the crates above)")
            continue
        print(f"{name:14} {k['fns']['api']:4} {k['methods']['api']:8} {k['types']['api']:6} {m:5} | {k['trait_methods']['api']:13} {k['consts']['api']:6} {k['assoc_consts']['api']:12} | {hid:6} {ts:12}")
    print(f"M total {total}")
    if a.list:
        for cr in crates:
            for x in CATS:
                for p, cl, it, paths in sorted(out[cr.name][x], key=lambda i: i[0]):
                    others = sorted(q for q in paths if q != p)
                    extra = ("  also " + ", ".join(others)) if others else ""
                    print(f"  {x[:-1]:12} {cl:12} {p}{extra}")
    if a.dup_paths:
        n = 0
        for cr in crates:
            for x in ("types", "fns", "consts"):
                for p, cl, it, paths in sorted(out[cr.name][x], key=lambda i: i[0]):
                    fac = sorted(q for q, c2 in paths.items() if q.startswith("devbuf::") and c2 == "api")
                    if len(fac) > 1:
                        n += 1
                        print(f"  {' '.join(fac)}")
        for M, paths in mods.values():
            fac = sorted(q for q, c2 in paths.items() if q.startswith("devbuf::") and c2 == "api")
            if len(fac) > 1:
                n += 1
                print(f"  mod {' '.join(fac)}")
        print(f"{n} items or modules with more than one public facade path")
    if a.budget is not None and total > a.budget:
        sys.exit(f"public surface M = {total} exceeds the budget {a.budget}")


if __name__ == "__main__":
    main()
