#!/usr/bin/env python3
"""The documentation (README.md and docs/*.md) keeps up with the code:

  (a) every JITBMM_* environment variable the library, the CLI or the Python package reads is documented;
  (b) every flag a `jitbmm` command accepts is documented;
  (c) every relative markdown link points to a file that exists, and a link to a section of a markdown file
      (`file.md#section`, `#section`) to a heading of that file;
  (d) given --cli PATH, every value list the docs give a flag (`--pass forward|grad_a|grad_b`) is one the
      CLI's help gives that flag, so a synopsis copied from an older help is caught;
  (e) no `cmake --build` is shown with a bare -j, which under Makefiles starts every job at once.

Variables are read from the string literals "JITBMM_..." of the library's, the CLI's and the Python package's
sources; flags from the "--flag" literals of cli/ (the Args(...) flag and switch lists, the bench modes, the
strategy table's variant flags) and, given --cli PATH, from `PATH <command> --help` as well. A name counts as
documented when it appears whole (JITBMM_CACHE is not documented by JITBMM_CACHE_DIR, --tile not by --tiled).
Usage: check_docs.py ROOT [--cli PATH]      (--self-test: checks that each kind of defect is caught)
"""
import os
import re
import subprocess
import sys
import tempfile

# Where the product reads its environment: the library's stages, the CLI, the Python package.
SOURCE_DIRS = ("include", "support", "generator", "cache", "reference", "runtime", "cli", "python/jitbmm")
SOURCES = (".cpp", ".hpp", ".h", ".c", ".py")
# "JITBMM_..." literals that are not environment variables the product reads, each with its reason. Test-only
# variables (JITBMM_FAKE_CUDA_*, JITBMM_FUZZ_*, JITBMM_TEST_INSTALLED) live under tests/ and are not scanned.
NOT_ENVIRONMENT = {
    "JITBMM_KERNEL_NAME": "a macro the generator defines in the emitted source, not an environment variable",
}
COMMANDS = ("demo", "inspect", "bench", "tune", "cache", "info")

ENV_LITERAL = re.compile(r"""["'](JITBMM_[A-Z0-9_]+)["']""")
FLAG_LITERAL = re.compile(r'"(--[a-z][a-z0-9-]*)')
FLAG_WORD = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
BARE_JOBS = re.compile(r"cmake --build\b[^\n`]*?\s-j(?=[\s`&;|]|$)", re.M)
COMMAND_LINE = re.compile(r"\bjitbmm (?:" + "|".join(COMMANDS) + r")\b")
FLAG_VALUES = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)[ =]([a-z0-9_]+(?:\|[a-z0-9_]+)+)(?![\w|])")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def doc_files(root):
    files = [os.path.join(root, "README.md")]
    docs = os.path.join(root, "docs")
    if os.path.isdir(docs):
        files += [os.path.join(docs, n) for n in sorted(os.listdir(docs)) if n.endswith(".md")]
    return [f for f in files if os.path.isfile(f)]


def source_files(root, dirs):
    for d in dirs:
        for dirpath, _, names in os.walk(os.path.join(root, d)):
            for name in sorted(names):
                if name.endswith(SOURCES):
                    yield os.path.join(dirpath, name)


def environment_variables(root):
    """{name: first file that mentions it} for the JITBMM_* variables the product reads."""
    found = {}
    for path in source_files(root, SOURCE_DIRS):
        for name in ENV_LITERAL.findall(read(path)):
            if name not in NOT_ENVIRONMENT:
                found.setdefault(name, os.path.relpath(path, root))
    return found


def cli_help(cli):
    """Every command's --help text, joined."""
    texts = []
    for command in COMMANDS:
        run = subprocess.run([cli, command, "--help"], capture_output=True, text=True, timeout=60)
        if run.returncode != 0:
            raise SystemExit(f"check_docs: `{cli} {command} --help` exited {run.returncode}: {run.stderr}")
        texts.append(run.stdout)
    return "\n".join(texts)


def cli_flags(root, help_text=None):
    """{flag: where it was found} for the flags of every jitbmm command."""
    found = {}
    for path in source_files(root, ("cli",)):
        for flag in FLAG_LITERAL.findall(read(path)):
            found.setdefault(flag, os.path.relpath(path, root))
    for flag in FLAG_WORD.findall(help_text or ""):
        found.setdefault(flag, "jitbmm --help")
    return found


def jitbmm_command_lines(text):
    """The lines that give a jitbmm command (`jitbmm inspect ...`) and the indented lines continuing one, not the
    flags of other programs (bench/compare.py's --dtype)."""
    out, continuing = [], False
    for line in text.splitlines():
        continuing = COMMAND_LINE.search(line) is not None or (continuing and re.match(r"^\s+[\[-]", line) is not None)
        if continuing:
            out.append(line)
    return out


def value_lists_unlike_help(root, help_text):
    """The docs' `--flag a|b|c` lists that the help never gives that flag (flags the help lists no values for are
    not checked)."""
    helped = {}
    for flag, values in FLAG_VALUES.findall(help_text):
        helped.setdefault(flag, set()).add(values)
    problems = []
    for path in doc_files(root):
        for flag, values in FLAG_VALUES.findall("\n".join(jitbmm_command_lines(read(path)))):
            if flag in helped and values not in helped[flag]:
                problems.append(f"{os.path.relpath(path, root)}: {flag} {values}, but the CLI's help says "
                                + " or ".join(f"{flag} {v}" for v in sorted(helped[flag])))
    return problems


def documented(name, text):
    return re.search(r"(?<![\w-])" + re.escape(name) + r"(?![\w-])", text) is not None


def anchors(path):
    """The section anchors of a markdown file, as GitHub makes them from its headings."""
    out = set()
    for title in HEADING.findall(FENCE.sub("", read(path))):
        slug = re.sub(r"[^\w\- ]", "", title.replace("`", "").lower()).replace(" ", "-")
        out.add(slug)
    return out


def broken_links(root):
    problems = []
    for path in doc_files(root):
        text = FENCE.sub("", read(path))
        for target in LINK.findall(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # a URL, a mail address
            file_part, _, anchor = target.partition("#")
            linked = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            if not os.path.exists(linked):
                problems.append(f"{os.path.relpath(path, root)}: link to {target}: no such file")
            elif anchor and linked.endswith(".md") and anchor not in anchors(linked):
                problems.append(f"{os.path.relpath(path, root)}: link to {target}: no such section")
    return problems


def check(root, cli=None):
    text = "\n".join(read(p) for p in doc_files(root))
    help_text = cli_help(cli) if cli else None
    problems = value_lists_unlike_help(root, help_text) if cli else []
    for name, where in sorted(environment_variables(root).items()):
        if not documented(name, text):
            problems.append(f"{where}: environment variable {name} is read but not documented in README.md or docs/")
    for flag, where in sorted(cli_flags(root, help_text).items()):
        if not documented(flag, text):
            problems.append(f"{where}: CLI flag {flag} is accepted but not documented in README.md or docs/")
    for path in doc_files(root):
        if BARE_JOBS.search(read(path)):
            problems.append(f"{os.path.relpath(path, root)}: cmake --build with a bare -j (give a count: -j\"$(nproc)\")")
    return problems + broken_links(root)


def self_test():
    """Plants one defect of each kind in a scratch tree and checks that each is reported, and only those."""
    planted = {
        "runtime/env.cpp": 'const char* v = std::getenv("JITBMM_PLANTED_VAR");\nint x = JITBMM_OK;\n'
                           'const char* k = "JITBMM_KERNEL_NAME";\n',
        "python/jitbmm/env.py": 'import os\nx = os.environ.get("JITBMM_DOCUMENTED")\n',
        "cli/cmd.cpp": 'Args args(argc, argv, 2, {"--shape", "--planted-flag"}, {"--tiled"});\n',
        "README.md": "# x\n`JITBMM_DOCUMENTED_TOO`, `JITBMM_DOCUMENTED`, `--shape`, `--tiled-more`\n"
                     "[fine](docs/a.md) [fine](docs/a.md#a-part-here) [web](https://example.com) [here](#x)\n"
                     "[broken](docs/missing.md)\n```\n[in code](nowhere.md)\n```\n"
                     "    jitbmm tune --shape S [--data normal|wide]\n                [--pass grad_a|grad_b]\n"
                     "`python bench/x.py --pass a|b`\n",
        "docs/b.md": "    cmake --build build -j && cmake --install build\n    cmake --build b -j\"$(nproc)\"\n",
        "cli/help.sh": "#!/bin/sh\necho '  jitbmm tune [--pass forward|grad_a|grad_b] [--data normal|wide]'\n",
        "docs/a.md": "## A `part`, here\n[up](../README.md) [gone](../bench/GONE.md) `--tiled`\n"
                     "[section](../README.md#x) [no section](../README.md#nowhere) [self](#a-part-here)\n",
    }
    want = [
        "cli/cmd.cpp: CLI flag --planted-flag",
        "runtime/env.cpp: environment variable JITBMM_PLANTED_VAR",
        "README.md: link to docs/missing.md",
        "docs/a.md: link to ../bench/GONE.md",
        "docs/a.md: link to ../README.md#nowhere",
        "docs/b.md: cmake --build with a bare -j",
        "README.md: --pass grad_a|grad_b, but the CLI's help says --pass forward|grad_a|grad_b",
    ]
    with tempfile.TemporaryDirectory() as root:
        for rel, text in planted.items():
            os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
                f.write(text)
        os.chmod(os.path.join(root, "cli/help.sh"), 0o755)
        found = check(root, os.path.join(root, "cli/help.sh"))
    missed = [w for w in want if not any(p.startswith(w) for p in found)]
    extra = [p for p in found if not any(p.startswith(w) for w in want)]
    if missed or extra:
        print("self-test failed: missed", missed, "wrongly reported", extra)
        return 1
    print(f"self-test: all {len(want)} planted defects caught, the documented names and good links pass")
    return 0


def main():
    args = sys.argv[1:]
    if args == ["--self-test"]:
        return self_test()
    cli = None
    if len(args) == 3 and args[1] == "--cli":
        cli = args[2]
    elif len(args) != 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    # A root without the project's README and sources has nothing to check, which would read as a pass.
    if not all(os.path.exists(os.path.join(args[0], part)) for part in ("README.md", "docs", "runtime", "cli")):
        print(f"{args[0]}: not jitbmm's source tree (README.md, docs/, runtime/ and cli/ expected)", file=sys.stderr)
        return 2
    problems = check(args[0], cli)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} documentation problem(s)")
        return 1
    print("docs: every environment variable and CLI flag is documented, every relative link resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
