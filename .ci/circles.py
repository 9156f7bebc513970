#!/usr/bin/env python3
"""Fails when the files of a crate import each other in a circle.

    python3 .ci/circles.py [CRATE_SRC ...]      (default: src layers/src)

File A depends on file B when A names a path of its crate (`crate::x::y`,
`super::x`, `self::x`, in a `use` or inline) whose longest module prefix
is B's module. A `mod.rs` (or `lib.rs`) naming its own descendants does not
count: that is the module's face (its re-exports), not a dependency. A
circle is a set of two or more files each reachable from the others; each
is printed with the names that tie it, and the exit status is 1.

Run by `.ci/run`. Move the shared piece down (a small module both use)
rather than tying two files together.
"""
import os
import re
import sys


def module_files(root):
    """{module path (tuple): file} for every `.rs` file under `root`."""
    files = {}
    for folder, _, names in os.walk(root):
        for name in names:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(folder, name)
            parts = os.path.relpath(path, root)[: -len(".rs")].split(os.sep)
            if parts[0] == "bin":
                continue
            if parts in (["lib"], ["main"]):
                module = ()
            elif parts[-1] == "mod":
                module = tuple(parts[:-1])
            else:
                module = tuple(parts)
            files[module] = path
    return files


def code_of(text):
    """The text with comments, string and character literals blanked (they
    name no path), in one pass, so that `//` in a string or a quote in a
    comment cannot mislead."""
    out, i, n = [], 0, len(text)
    while i < n:
        ch = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
            out.append(" ")
        elif ch == "r" and re.match(r'r#*"', text[i:]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_") or text[i - 1] == "b"):
            hashes = re.match(r"r(#*)\"", text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            i = n if end < 0 else end + 1 + len(hashes)
            out.append('""')
        elif ch == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append('""')
        elif ch == "'" and re.match(r"'(?:\\.[^']*|[^'\\])'", text[i:]):
            i += len(re.match(r"'(?:\\.[^']*|[^'\\])'", text[i:]).group(0))
            out.append("' '")
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def split_top(body):
    """`a, b::{c, d}` split at its top-level commas."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    return [p.strip() for p in parts if p.strip()]


def use_paths(tree):
    """`a::{b, c::{d as e}}` as [[a, b], [a, c, d]]."""
    tree = tree.strip()
    brace = tree.find("{")
    if brace < 0:
        words = tree.split(" as ")[0].split("::")
        return [[w.strip() for w in words if w.strip() and w.strip() != "*"]]
    prefix = [w.strip() for w in tree[:brace].split("::") if w.strip()]
    inner = tree[brace + 1 : tree.rfind("}")]
    return [prefix + rest for part in split_top(inner) for rest in use_paths(part)]


USE = re.compile(r"\buse\s+((?:crate|super|self)\s*::[^;]*);", re.S)
INLINE = re.compile(r"\b(crate|super|self)((?:\s*::\s*[A-Za-z_][A-Za-z0-9_]*)+)")


def named_paths(code):
    """Every crate path the code names, as lists of words."""
    paths = []
    for m in USE.finditer(code):
        paths.extend(use_paths(m.group(1)))
    rest = USE.sub(" ", code)
    for m in INLINE.finditer(rest):
        words = [m.group(1)] + [w.strip() for w in m.group(2).split("::") if w.strip()]
        paths.append(words)
    return paths


def resolve(words, module):
    """The path as seen from the crate's root."""
    words = list(words)
    if words[0] == "crate":
        return words[1:]
    if words[0] == "self":
        return list(module) + words[1:]
    base = list(module)
    while words and words[0] == "super":
        base = base[:-1]
        words = words[1:]
    return base + words


def edges(root):
    files = module_files(root)
    by_file = {path: module for module, path in files.items()}
    deps = {path: {} for path in files.values()}
    for path, module in by_file.items():
        is_face = os.path.basename(path) in ("mod.rs", "lib.rs", "main.rs")
        with open(path, encoding="utf-8") as f:
            code = code_of(f.read())
        for words in named_paths(code):
            full = resolve(words, module)
            for cut in range(len(full), -1, -1):
                target = files.get(tuple(full[:cut]))
                if target is None:
                    continue
                if target != path:
                    # A module's face naming its own descendants.
                    if is_face and tuple(full[:cut])[: len(module)] == module:
                        break
                    name = full[cut] if cut < len(full) else full[-1] if full else "self"
                    deps[path].setdefault(target, set()).add(name)
                break
    return deps


def circles(deps):
    """Strongly connected components of two or more files (Tarjan)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in deps[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in sorted(deps):
        if v not in index:
            visit(v)
    return found


def main():
    roots = sys.argv[1:] or ["src", "layers/src"]
    failed = False
    for root in roots:
        deps = edges(root)
        for n, files in enumerate(circles(deps), 1):
            failed = True
            print(f"!! import circle {n} in {root}: {', '.join(files)}")
            for a in files:
                for b in files:
                    if b in deps[a]:
                        print(f"   {a} -> {b}: {', '.join(sorted(deps[a][b]))}")
    if failed:
        print("!! move what ties them to a module below both (see the top of .ci/circles.py)")
        return 1
    print(f"no import circles in {', '.join(roots)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
