#!/usr/bin/env python3
"""The folders are stages, and each may include only the stages beneath it (docs/architecture.md):

    include/ (public types) <- support/ <- templates/ <- generator/ <- runtime/ -> cache/
                                       reference/ (public types and support/ only)

This fails, naming the file, the line and the two folders, when a file includes a header of a stage it may not
see, and when generator/ (spec -> source text, pure) reads the environment, touches files or logs.
Usage: check_layers.py ROOT      (--self-test: checks that each kind of defect is caught)
"""
import os
import re
import sys
import tempfile

# Which folders each folder's files may include from (its own always).
ALLOWED = {
    "include": {"include"},
    "support": {"include"},
    "templates": set(),  # device code: other templates only, by their bare names
    "generator": {"include", "support", "templates"},
    "cache": {"include", "support"},
    "reference": {"include", "support"},
    "runtime": {"include", "support", "templates", "generator", "cache", "reference"},
}
# generator/ is pure: no environment, no files, no logging.
IMPURE = re.compile(r"\b(getenv|fopen|ofstream|ifstream|fstream|std::cerr|std::cout|fprintf|printf|puts|"
                    r"log_message|open\s*\(|mkstemp|rename\s*\(|unlink\s*\()")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCES = (".cpp", ".hpp", ".h", ".cuh")


def folder_of(include, here):
    """The stage a quoted include names: its first path part, or templates/ for a bare template name."""
    if "/" in include:
        first = include.split("/", 1)[0]
        return "include" if first == "jitbmm" else first
    if include.endswith(".cuh"):
        return "templates"
    return here  # a bare name: the including file's own folder


def check(root):
    problems = []
    for folder, allowed in ALLOWED.items():
        base = os.path.join(root, folder)
        for dirpath, _, names in os.walk(base):
            for name in sorted(names):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8") as f:
                    lines = f.read().split("\n")
                for number, line in enumerate(lines, 1):
                    m = INCLUDE.match(line)
                    if m:
                        target = folder_of(m.group(1), folder)
                        if target != folder and target not in allowed:
                            problems.append(f"{rel}:{number}: {folder}/ includes {m.group(1)} from {target}/, a "
                                            f"stage it may not see (allowed: {', '.join(sorted(allowed)) or 'none'})")
                    if folder == "generator":
                        code = line.split("//", 1)[0]
                        hit = IMPURE.search(code)
                        if hit:
                            problems.append(f"{rel}:{number}: generator/ must be pure (no environment, files or "
                                            f"logging) but uses '{hit.group(1)}'")
    return problems


def self_test():
    """Plants one defect of each kind in a scratch tree and checks that each is reported."""
    planted = {
        "cache/bad.cpp": '#include "runtime/device.hpp"\n',
        "generator/env.cpp": 'int f() { return std::getenv("X") != nullptr; }\n',
        "generator/log.cpp": 'void g() { log_message(LogLevel::warn, "x"); }\n',
        "reference/bad.cpp": '#include "generator/emit_source.hpp"\n',
        "support/bad.hpp": '#include "runtime/jit.hpp"\n',
        "templates/bad.cuh": '#include "support/layout.hpp"\n',
        "generator/fine.cpp": '#include "support/layout.hpp"\n#include "params.cuh"\n// getenv in a comment\n',
        "runtime/fine.cpp": '#include "cache/disk_cache.hpp"\n#include "generator/emit_source.hpp"\n',
    }
    with tempfile.TemporaryDirectory() as root:
        for rel, text in planted.items():
            os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
                f.write(text)
        found = check(root)
    caught = {p.split(":", 1)[0] for p in found}
    want = {rel for rel in planted if "fine" not in rel}
    if caught != want:
        print("self-test failed: caught", sorted(caught), "expected", sorted(want))
        return 1
    print(f"self-test: all {len(want)} planted defects caught, the 2 clean files pass")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    problems = check(sys.argv[1])
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} layering defect(s)")
        return 1
    print("layers: every include points down; generator/ is pure")
    return 0


if __name__ == "__main__":
    sys.exit(main())
