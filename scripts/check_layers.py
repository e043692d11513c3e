#!/usr/bin/env python3
"""The include graph's rules (docs/ARCHITECTURE.md, "Layers"), checked on the source tree.

Library folders stand in layers, lowest first: common/, server/, trainer/, heter_trainer/.
A library folder may include its own folder, its layer's other folders, and the layers
below; never a layer above. Among all library folders the include graph has no cycle. The
composition roots (apps/) and tools/, bench/, test/ stand above every layer.

    scripts/check_layers.py            exit 1, naming file:line, on a back edge or a cycle
    scripts/check_layers.py --graph    also print the folder graph (one "a -> b" per line)
"""
import os
import re
import sys

LAYERS = ["common", "server", "trainer", "heter_trainer"]
SOURCES = (".h", ".cc", ".cu", ".cuh")
INCLUDE = re.compile(r'\s*#\s*include\s+"([^"]+)"')


def layer(folder):
    return LAYERS.index(folder.split("/")[0])


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    os.chdir(root)
    edges = {}  # folder -> {folder: "file:line" of its first include}
    errors = []
    for top in LAYERS:
        for dirpath, _, files in os.walk(top):
            for name in sorted(files):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = os.path.dirname(m.group(1))
                        if not target or target.split("/")[0] not in LAYERS + ["apps", "tools", "bench", "test"]:
                            continue  # generated headers (fleetps/config.h, *_generated.h), system headers
                        where = f"{path}:{number}"
                        if target.split("/")[0] not in LAYERS:
                            errors.append(f"{where}: includes {m.group(1)}, above every library layer")
                            continue
                        if layer(target) > layer(dirpath):
                            errors.append(f"{where}: {dirpath}/ includes {m.group(1)}, a layer above it "
                                          f"({' < '.join(LAYERS)})")
                        if target != dirpath:
                            edges.setdefault(dirpath, {}).setdefault(target, where)
    errors += cycles(edges)
    if "--graph" in sys.argv:
        for src in sorted(edges):
            for dst in sorted(edges[src]):
                print(f"{src} -> {dst}")
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"check_layers: {len(errors)} problem(s) in the include graph", file=sys.stderr)
        return 1
    print(f"check_layers: {sum(len(d) for d in edges.values())} folder edges, no back edge, no cycle")
    return 0


def cycles(edges):
    """Every cycle's folders (Tarjan's strongly connected components), with one include of each edge."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, {}):
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
                members = set(component)
                links = [f"{a} -> {b} ({edges[a][b]})" for a in sorted(members) for b in sorted(edges.get(a, {}))
                         if b in members]
                out.append("include cycle among " + ", ".join(sorted(members)) + ": " + "; ".join(links))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


if __name__ == "__main__":
    sys.exit(main())
