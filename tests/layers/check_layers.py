#!/usr/bin/env python3
"""The folders are stages, and each may include only the stages beneath it (docs/architecture.md):

    include/ (public types) <- support/ <- templates/ <- generator/ <- runtime/ -> cache/
                                       reference/ (public types and support/ only)

runtime/ has three inner stages, each seeing the ones beneath it:

    engine (the JIT pipeline, launches, scratch, devices) <- tuner (runtime/tuner/) <- plan (the public face)

Every runtime file belongs to one of them: runtime/tuner/ to the tuner, the others by the lists in RUNTIME_STAGES
(a runtime file in no list is a defect, so a new file is placed on purpose).

templates/ (device code) has levels of its own, one folder each: core/ beneath every family; hopper/ (sm_90a
primitives) beneath the families that use tensor-core pipelines; the families direct/, tiled/, grad/, chain/ and
structured/ side by side; exp_matmul/ above tiled/, grad/ and hopper/. A template includes other templates by their path under templates/,
and the file must exist. The entry points the strategies name (a "family/name.cuh" string in generator/) are
family headers, never core/ or hopper/. A template outside these folders is a defect.

The public headers (include/jitbmm/) belong to levels too, and a stage may include only those of the levels it sees:
    types.hpp, kernel_spec.hpp, errors.hpp, version.hpp,  the vocabulary: every stage
    chain_problem.hpp
    reference.hpp                                         the CPU reference's face: reference/, and runtime's tuner
                                                          (its trials check results) and plan
    plan.hpp, chain.hpp, chain_expectation.hpp,           the library's face: runtime's plan stage only
    chain_samples.hpp, chain_kbest.hpp, entropy_product.hpp,
    kmax_product.hpp, jitbmm.hpp, c_api.h
So generator/, support/, cache/, the engine and the tuner never include jitbmm/plan.hpp or jitbmm/jitbmm.hpp, and a
vocabulary header includes only the vocabulary. A public header in no level is a defect.

Within a stage, no two units include each other, directly or around a longer loop: a unit is a file's stem (its
.cpp with its .hpp, or a lone header), so runtime/a.cpp including runtime/b.hpp while runtime/b.cpp includes
runtime/a.hpp is a loop, though no header includes itself. A loop means neither file's idea can be read, built or
tested without the other's, so one of them holds two ideas or a piece both share; each loop is reported once, with
the include lines that close it.

This fails, naming the file, the line and the two stages, when a file includes a header of a stage it may not
see, naming the files and lines of each loop between units of one stage, and when generator/ (spec -> source text,
pure) reads the environment, touches files or logs.
Usage: check_layers.py ROOT      (--self-test: checks that each kind of defect is caught)
"""
import os
import re
import sys
import tempfile

ENGINE, TUNER, PLAN = "runtime:engine", "runtime:tuner", "runtime:plan"
LOWER = {"include", "support", "templates", "generator", "cache"}
# templates/<folder>/: the device code's levels, and which levels each may include (its own always).
DEVICE = {
    "core": set(),
    "hopper": {"core"},
    "direct": {"core"},
    "tiled": {"core"},
    "grad": {"core"},
    "exp_matmul": {"core", "hopper", "tiled", "grad"},
    "chain": {"core"},
    "structured": {"core"},
}
ENTRY_FAMILIES = {"direct", "tiled", "grad", "exp_matmul", "chain", "structured"}  # what a strategy may name as its entry header
ENTRY = re.compile(r'"([a-z_0-9]+)/([a-z_0-9]+\.cuh)"')
FRAME_TEMPLATES = {"core/grid_dependency.cuh"}  # what generator/emit_source.cpp's frame of every unit inlines
# Which stages each stage's files may include from (its own always).
ALLOWED = {
    "include": {"include"},
    "support": {"include"},
    "templates": set(),  # device code: other templates only, by the levels of DEVICE
    "generator": {"include", "support", "templates"},
    "cache": {"include", "support"},
    "reference": {"include", "support"},
    ENGINE: LOWER,
    TUNER: LOWER | {"reference", ENGINE},
    PLAN: LOWER | {"reference", ENGINE, TUNER},
}
# runtime/<stem>.{cpp,hpp}: the stage of each file outside runtime/tuner/.
RUNTIME_STAGES = {
    ENGINE: {"background_build", "device", "device_memory", "device_pool", "driver_api", "grad_launch", "jit",
             "kernel_files", "launch",
             "nvrtc_api", "nvrtc_compiler", "probes", "scratch", "timing", "events", "side_streams"},
    TUNER: {"autotune"},  # the tuner's one header for the plan stage
    PLAN: {"backward", "c_api_chains", "c_api_library", "c_api_products", "c_api_status", "c_api_xla",
           "c_api_xla_products", "c_api_xla_chains", "c_api_xla_distributions", "c_api_xla_expectation",
           "c_api_xla_hmm_distributions",
           "chain_candidate",
           "chain_chunked", "chain_chunked_backward", "chain_choice", "chain_hmm_backward", "hmm_gradients", "hmm_sums",
           "chain_plan",
           "chain_plan_impl",
           "chain_fused_steps", "chain_step_products", "chain_stepped", "chain_stepped_backward", "chain_expectation",
           "chain_samples", "chain_sequential", "chain_stand_in", "chain_strategy", "product_stand_in",
           "product_workspace_bound",
           "chain_kbest", "entropy_product", "kmax_product", "distribution_checks", "crash_backtrace", "plan", "plan_impl", "repair_watch"},
}
# include/jitbmm/<name>: the level of each public header (the docstring says why).
PUBLIC_LEVELS = {
    "types.hpp": "include", "kernel_spec.hpp": "include", "errors.hpp": "include", "version.hpp": "include",
    "chain_problem.hpp": "include",
    "reference.hpp": "reference",
    "plan.hpp": PLAN, "chain.hpp": PLAN, "chain_expectation.hpp": PLAN, "chain_samples.hpp": PLAN,
    "chain_kbest.hpp": PLAN, "entropy_product.hpp": PLAN,
    "kmax_product.hpp": PLAN, "jitbmm.hpp": PLAN, "c_api.h": PLAN,
}
# generator/ is pure: no environment, no files, no logging.
IMPURE = re.compile(r"\b(getenv|fopen|ofstream|ifstream|fstream|std::cerr|std::cout|fprintf|printf|puts|"
                    r"log_message|open\s*\(|mkstemp|rename\s*\(|unlink\s*\()")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCES = (".cpp", ".hpp", ".h", ".cuh")


def stage_of(rel):
    """The stage of a library file by its path from the root; None when it is in none."""
    parts = rel.split("/")
    if parts[0] == "include":
        return PUBLIC_LEVELS.get(parts[-1]) if parts[:2] == ["include", "jitbmm"] and len(parts) == 3 else None
    if parts[0] == "runtime":
        if len(parts) > 2:
            return TUNER if parts[1] == "tuner" and len(parts) == 3 else None
        stem = os.path.splitext(parts[1])[0]
        return next((stage for stage, stems in RUNTIME_STAGES.items() if stem in stems), None)
    if parts[0] == "templates":
        return "templates:" + parts[1] if len(parts) == 3 and parts[1] in DEVICE else None
    return parts[0] if parts[0] in ALLOWED else None


def allowed_for(stage):
    if stage.startswith("templates:"):
        return {"templates:" + level for level in DEVICE[stage.split(":", 1)[1]]}
    return ALLOWED[stage]


def sees(allowed, target):
    """Whether a stage that sees `allowed` may include a file of stage `target` (host stages see every template)."""
    return target in allowed or (target.startswith("templates:") and "templates" in allowed)


def included_path(include, here):
    """The path from the root of a quoted include in the file `here`: a template's path under templates/ for any
    .cuh (the device code includes its own files that way), jitbmm/ under include/, a bare name beside `here`."""
    if include.endswith(".cuh"):
        return include if include.startswith("templates/") else "templates/" + include
    if "/" not in include:
        return os.path.join(os.path.dirname(here), include)
    return "include/" + include if include.startswith("jitbmm/") else include


def describe(stage):
    if stage.startswith("templates:"):
        return "templates/" + stage.split(":", 1)[1] + "/"
    return stage.replace("runtime:", "runtime's ") if stage.startswith("runtime:") else stage + "/"


def unit_of(rel):
    """The unit a file belongs to: its path without the extension (a .cpp and its .hpp are one)."""
    return os.path.splitext(rel)[0]


def loops(edges):
    """The loops among units: each strongly connected set of more than one unit, as the include lines of one cycle
    through it (from its first unit by name) and every unit of the set. `edges` maps (unit, unit) to the first
    (file, line, include) that makes the first unit include the second."""
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, on_stack, stack, sets = {}, {}, set(), [], []
    for start in sorted(graph):  # Tarjan's, iterative: a deep include chain must not exhaust Python's stack
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            child = next(successors, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    members = set()
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        members.add(top)
                        if top == node:
                            break
                    if len(members) > 1:
                        sets.append(members)
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    found = []
    for members in sorted(sets, key=min):
        first = min(members)
        previous, queue = {first: None}, [first]  # the shortest way around from `first` back to it
        cycle = None
        while queue and cycle is None:
            node = queue.pop(0)
            for child in sorted(graph[node] & members):
                if child == first:
                    cycle = [node]
                    while previous[cycle[-1]] is not None:
                        cycle.append(previous[cycle[-1]])
                    cycle.reverse()
                    break
                if child not in previous:
                    previous[child] = node
                    queue.append(child)
        cycle.append(first)
        found.append(([edges[(a, b)] for a, b in zip(cycle, cycle[1:])], sorted(members)))
    return found


def check(root):
    problems = []
    edges = {}  # (unit, unit) of one stage -> (file, line, include): the first include that joins them
    for folder in ("include", "support", "templates", "generator", "cache", "reference", "runtime"):
        for dirpath, _, names in os.walk(os.path.join(root, folder)):
            for name in sorted(names):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                stage = stage_of(rel)
                if stage is None:
                    problems.append(f"{rel}:1: belongs to no stage (add it to RUNTIME_STAGES, PUBLIC_LEVELS or "
                                    f"DEVICE in tests/layers/check_layers.py, and to docs/architecture.md)")
                    continue
                allowed = allowed_for(stage)
                with open(path, encoding="utf-8") as f:
                    lines = f.read().split("\n")
                for number, line in enumerate(lines, 1):
                    m = INCLUDE.match(line)
                    if m:
                        target_path = included_path(m.group(1), rel)
                        target = stage_of(target_path)
                        if target is None:
                            problems.append(f"{rel}:{number}: {describe(stage)} includes {m.group(1)}, which "
                                            f"belongs to no stage")
                        elif target != stage and not sees(allowed, target):
                            seen = ", ".join(describe(s) for s in sorted(allowed)) or "none"
                            problems.append(f"{rel}:{number}: {describe(stage)} includes {m.group(1)} from "
                                            f"{describe(target)}, a stage it may not see (it sees: {seen})")
                        elif stage.startswith("templates:") and not os.path.isfile(os.path.join(root, target_path)):
                            problems.append(f"{rel}:{number}: includes {m.group(1)}, which is no template")
                        if target == stage and unit_of(target_path) != unit_of(rel):
                            edges.setdefault((unit_of(rel), unit_of(target_path)), (rel, number, target_path))
                    if stage == "generator" and not m:
                        for e in ENTRY.finditer(line.split("//", 1)[0]):
                            if rel == "generator/emit_source.cpp" and e.group(0).strip('"') in FRAME_TEMPLATES:
                                continue
                            if e.group(1) not in ENTRY_FAMILIES:
                                problems.append(f"{rel}:{number}: names {e.group(0)} as an entry header: entry "
                                                f"headers are a family's ({', '.join(sorted(ENTRY_FAMILIES))})")
                            elif not os.path.isfile(os.path.join(root, "templates", e.group(1), e.group(2))):
                                problems.append(f"{rel}:{number}: names {e.group(0)} as an entry header, which is "
                                                f"no template")
                    if stage == "generator":
                        code = line.split("//", 1)[0]
                        hit = IMPURE.search(code)
                        if hit:
                            problems.append(f"{rel}:{number}: generator/ must be pure (no environment, files or "
                                            f"logging) but uses '{hit.group(1)}'")
    for cycle, members in loops(edges):
        (rel, number, _), closing = cycle[0], ", ".join(f"{f}:{n} includes {t}" for f, n, t in cycle[1:])
        problems.append(f"{rel}:{number}: includes {cycle[0][2]}, and {closing}: a loop between the units "
                        f"{', '.join(members)} of one stage (move what both need into a file of its own, or pass "
                        f"it in)")
    return problems


def self_test():
    """Plants one defect of each kind in a scratch tree, beside files that break no rule, and checks that exactly the
    defects are reported."""
    defects = {
        "cache/bad.cpp": '#include "runtime/device.hpp"\n',
        "generator/env.cpp": 'int f() { return std::getenv("X") != nullptr; }\n',
        "generator/log.cpp": 'void g() { log_message(LogLevel::warn, "x"); }\n',
        "reference/bad.cpp": '#include "generator/emit_source.hpp"\n',
        "support/bad.hpp": '#include "runtime/jit.hpp"\n',
        "templates/bad.cuh": '#include "core/params.cuh"\n',  # a template in no level
        "templates/tiled/host.cuh": '#include "support/layout.hpp"\n',
        # the device code's levels: core beneath the families, families side by side, exp_matmul above them
        "templates/core/up.cuh": '#include "tiled/tiled.cuh"\n',
        "templates/hopper/up.cuh": '#include "grad/backward.cuh"\n',
        "templates/direct/side.cuh": '#include "tiled/tiled.cuh"\n',
        "templates/tiled/up.cuh": '#include "exp_matmul/prepare.cuh"\n',
        "templates/grad/missing.cuh": '#include "core/absent.cuh"\n',
        "templates/odd/file.cuh": '#include "core/params.cuh"\n',
        # a strategy's entry header: a family's, and one that exists
        "generator/strategies/core_entry.cpp": 'Rendering r{{"core/dtypes.cuh"}, "BmmParams", {}};\n',
        "generator/strategies/absent_entry.cpp": 'return {{"tiled/absent.cuh"}, "BmmParams", {e}};\n',
        # runtime's inner stages: the engine sees neither the tuner nor the plan, the tuner not the plan
        "runtime/launch.cpp": '#include "runtime/autotune.hpp"\n',
        "runtime/jit.cpp": '#include "runtime/tuner/choose.hpp"\n',
        "runtime/device.cpp": '#include "runtime/plan_impl.hpp"\n',
        "runtime/tuner/trials.cpp": '#include "runtime/backward.hpp"\n',
        # the public headers' levels
        "runtime/scratch.hpp": '#include "jitbmm/plan.hpp"\n',
        "runtime/tuner/choose.cpp": '#include "jitbmm/jitbmm.hpp"\n',
        "runtime/timing.hpp": '#include "jitbmm/reference.hpp"\n',
        "generator/face.cpp": '#include "jitbmm/plan.hpp"\n',
        "generator/oracle.cpp": '#include "jitbmm/reference.hpp"\n',
        "support/umbrella.hpp": '#include "jitbmm/jitbmm.hpp"\n',
        "cache/c.cpp": '#include "jitbmm/c_api.h"\n',
        "include/jitbmm/kernel_spec.hpp": '#include "jitbmm/plan.hpp"\n',
        # files and headers in no stage
        "runtime/unlisted.cpp": '#include "runtime/jit.hpp"\n',
        "include/jitbmm/unlisted.hpp": '#include "jitbmm/types.hpp"\n',
        "runtime/plan.cpp": '#include "runtime/unlisted.hpp"\n',
        # loops between units of one stage, reported once each at the first unit by name: two units whose .cpp
        # files include each other's header, three around a header, two templates
        "runtime/kernel_files.cpp": '#include "runtime/probes.hpp"\n',
        "runtime/tuner/alpha.cpp": '#include "runtime/tuner/beta.hpp"\n',
        "templates/core/loop_a.cuh": '#include "core/loop_b.cuh"\n',
    }
    clean = {
        "templates/core/params.cuh": "",
        "templates/core/dtypes.cuh": '#include "core/params.cuh"\n',
        "templates/tiled/tiled.cuh": '#include "core/dtypes.cuh"\n',
        "templates/grad/backward.cuh": '#include "core/params.cuh"\n',
        "templates/hopper/wgmma.cuh": '#include "core/dtypes.cuh"\n',
        "templates/exp_matmul/prepare.cuh": '#include "core/params.cuh"\n#include "tiled/tiled.cuh"\n'
                                            '#include "grad/backward.cuh"\n#include "hopper/wgmma.cuh"\n',
        "generator/strategies/tiled.cpp": '// the entry (templates/tiled/tiled.cuh)\n#include "templates/core/params.cuh"\n'
                                          'return {{tiled_header(s), "tiled/tiled.cuh", "exp_matmul/prepare.cuh"}};\n',
        "generator/fine.cpp": '#include "support/layout.hpp"\n#include "templates/core/params.cuh"\n'
                              '#include "jitbmm/kernel_spec.hpp"\n// getenv in a comment\n',
        "runtime/c_api_library.cpp": '#include "cache/disk_cache.hpp"\n#include "generator/emit_source.hpp"\n'
                                     '#include "jitbmm/c_api.h"\n#include "jitbmm/plan.hpp"\n'
                                     '#include "runtime/autotune.hpp"\n#include "runtime/backward.hpp"\n'
                                     '#include "runtime/launch.hpp"\n',
        "runtime/launch.hpp": '#include "runtime/jit.hpp"\n#include "templates/core/params.cuh"\n'
                              '#include "jitbmm/types.hpp"\n',
        "runtime/tuner/search_space.cpp": '#include "runtime/tuner/trials.hpp"\n#include "runtime/grad_launch.hpp"\n'
                                          '#include "jitbmm/reference.hpp"\n#include "generator/strategy.hpp"\n',
        "runtime/autotune.hpp": '#include "runtime/tuner/choose.hpp"\n',
        "reference/fine.cpp": '#include "jitbmm/reference.hpp"\n#include "support/layout.hpp"\n',
        "include/jitbmm/jitbmm.hpp": '#include "jitbmm/plan.hpp"\n#include "jitbmm/reference.hpp"\n'
                                     '#include "jitbmm/errors.hpp"\n',
        "include/jitbmm/plan.hpp": '#include "jitbmm/kernel_spec.hpp"\n',
        # the other halves of the loops above (each loop is one defect), and a unit that includes its own header
        "runtime/probes.cpp": '#include "runtime/kernel_files.hpp"\n',
        "runtime/tuner/beta.hpp": '#include "runtime/tuner/gamma.hpp"\n',
        "runtime/tuner/gamma.cpp": '#include "runtime/tuner/alpha.hpp"\n',
        "templates/core/loop_b.cuh": '#include "core/loop_a.cuh"\n',
        "runtime/device_memory.cpp": '#include "runtime/device_memory.hpp"\n#include "runtime/device.hpp"\n',
    }
    with tempfile.TemporaryDirectory() as root:
        for rel, text in {**defects, **clean}.items():
            os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
                f.write(text)
        found = check(root)
    caught = {p.split(":", 1)[0] for p in found}
    if caught != set(defects) or len(found) != len(defects):
        print("self-test failed: caught", sorted(caught), "expected", sorted(defects))
        for p in found:
            print("  ", p)
        return 1
    print(f"self-test: all {len(defects)} planted defects caught, the {len(clean)} clean files pass")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    # A root without the project's sources has no include to check, which would read as a pass.
    if not all(os.path.isdir(os.path.join(sys.argv[1], part)) for part in ("include", "runtime", "templates")):
        print(f"{sys.argv[1]}: not jitbmm's source tree (include/, runtime/ and templates/ expected)", file=sys.stderr)
        return 2
    problems = check(sys.argv[1])
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} layering defect(s)")
        return 1
    print("layers: every include points down, runtime's engine < tuner < plan, each public header at its level, "
          "templates' core < families < exp_matmul and the entry headers a family's; generator/ is pure")
    return 0


if __name__ == "__main__":
    sys.exit(main())
