#!/usr/bin/env python3
"""Reports C++ functions longer than a limit (default 80 lines, signature to closing brace).

A function may be longer when the comment block directly above its signature (or above its
`template` line) has a line containing "Long:" with the reason. Exits 1 when a function over the
limit has no such reason, 0 otherwise.

  scripts/check_function_length.py [--limit N] [--all] [paths...]   (default: the source folders)

The scan is lexical: comments, strings and preprocessor lines are blanked, then braces are
matched. A brace at namespace or class scope opens a function body when the text before it
holds a parameter list and is not a class, enum, namespace or brace-initialised variable.
Lambdas and local classes count towards the function that holds them.
"""
import argparse
import os
import re
import sys

SOURCE_DIRS = ["common", "server", "trainer", "heter_trainer", "tools", "apps"]
EXTENSIONS = (".h", ".cc", ".cu", ".cuh")
SCOPE_RE = re.compile(r"\b(namespace|class|struct|union|enum)\b")
LABEL_RE = re.compile(r"^\s*(public|private|protected)\s*:(?!:)")


def blank(text):
    """Comments, string and char literals and preprocessor lines as spaces; newlines kept."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#":
            j = i
            while j < n:  # to the end of the line, following continuations
                if text[j] == "\n" and text[j - 1] != "\\":
                    break
                j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c == "\n":
            line_start = True
            out.append(c)
            i += 1
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # digit separator: 1'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else " " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def has_reason(lines, start_line):
    """True when the comment block directly above line `start_line` (0-based) says "Long:"."""
    i = start_line - 1
    while i >= 0 and lines[i].strip().startswith("//"):
        if "Long:" in lines[i]:
            return True
        i -= 1
    return False


def functions(path):
    """Yields (name, first line, last line, has_reason) of every function defined in `path`."""
    with open(path, encoding="utf-8", errors="replace") as f:
        raw = f.read()
    text = blank(raw)
    lines = raw.split("\n")
    stack = []  # per open brace outside function bodies: "scope" or "block"
    header_start = 0  # where the text before the next brace at this level begins
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "{":
            if stack and stack[-1] != "scope":
                stack.append("block")
            else:
                kind, name, first = classify(text, header_start, i)
                if kind == "function" and in_initializer_list(text, first, i):
                    i = match(text, i)  # a member's brace initializer: the body comes later
                    continue
                if kind == "function":
                    j = match(text, i)
                    first_line = text.count("\n", 0, first)
                    last_line = text.count("\n", 0, j - 1)
                    yield name, first_line + 1, last_line + 1, has_reason(lines, first_line)
                    i = header_start = j
                    continue
                stack.append(kind)
            header_start = i + 1
        elif c == "}":
            if stack:
                stack.pop()
            header_start = i + 1
        elif c == ";" and (not stack or stack[-1] == "scope"):
            header_start = i + 1
        i += 1


def match(text, brace):
    """The index just past the brace that closes the one at `brace`."""
    depth, j = 0, brace
    while j < len(text):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return j


def in_initializer_list(text, first, brace):
    """True when the brace at `brace` initialises a member in a constructor's initializer list
    (`: rng_(std::random_device{}())`, `: count_{0}`) rather than opening the body."""
    header = text[first:brace]
    open_paren = header.find("(")
    depth = 0
    for k in range(open_paren, len(header)):
        if header[k] == "(":
            depth += 1
        elif header[k] == ")":
            depth -= 1
            if depth == 0:
                rest = header[k + 1:]
                break
    else:
        return False
    if not re.search(r"(?<!:):(?!:)", rest):
        return False
    before = header.rstrip()
    return bool(before) and (before[-1].isalnum() or before[-1] in "_>")


def classify(text, start, brace):
    """What the brace at `brace` opens, given the text since the previous statement."""
    header = text[start:brace]
    offset = start
    while True:  # drop access labels
        m = LABEL_RE.match(header)
        if not m:
            break
        header = header[m.end():]
        offset += m.end()
    stripped = header.lstrip()
    first = offset + len(header) - len(stripped)
    paren = stripped.find("(")
    before_paren = stripped if paren < 0 else stripped[:paren]
    if SCOPE_RE.search(before_paren) or stripped.startswith("extern"):
        return "scope", "", first
    plain = re.sub(r"operator\s*[^\s(]*", "operator", before_paren)
    if paren < 0 or re.search(r"=\s*$", stripped) or re.search(r"(?<![=<>!])=(?!=)", plain):
        return "block", "", first
    m = re.search(r"((?:[\w:]*::)?operator\s*\S+|[~\w:]+)\s*$", stripped[:paren])
    name = m.group(1) if m else stripped[:paren].strip()
    return "function", name, first


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="*", help="files or folders (default: the source folders)")
    parser.add_argument("--limit", type=int, default=80, help="most lines a function may have (default 80)")
    parser.add_argument("--all", action="store_true", help="also list long functions that give a reason")
    args = parser.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = args.paths or [os.path.join(root, d) for d in SOURCE_DIRS]
    files = []
    for p in paths:
        if os.path.isdir(p):
            for dirpath, _, names in os.walk(p):
                files += [os.path.join(dirpath, f) for f in names if f.endswith(EXTENSIONS)]
        else:
            files.append(p)
    unexplained = 0
    for path in sorted(files):
        for name, first, last, reason in functions(path):
            length = last - first + 1
            if length <= args.limit or (reason and not args.all):
                continue
            unexplained += 0 if reason else 1
            note = "" if not reason else "  (Long: reason given)"
            print(f"{os.path.relpath(path, root)}:{first}: {name} is {length} lines{note}")
    if unexplained:
        print(f"{unexplained} function(s) over {args.limit} lines without a '// Long: <reason>' comment above them",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
