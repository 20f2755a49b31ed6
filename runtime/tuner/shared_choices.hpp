// One process's choices made every process's: rank 0 of a job exports the variants it settled on, every other rank
// imports them (jitbmm.torch.share_choices over torch.distributed does both), so all ranks of a job, on every
// machine, run the same variant of each problem: the same rounding everywhere.
//
// The text is a line "device <arch and level> <name>" naming the exporter's current device, then one line per
// choice, "choice <pass> <problem> | <spec>", the problem as problem_text writes it; the importer stores each as its
// machine's exact decision for that problem on its current device (found first by the cascade, in this process and in
// later ones on the machine) and forgets the choices made so far, so plans made from then on use the imported ones.
// Plans already made keep their variant. A choice made on another kind of device (or in a text without the device
// line) is stored as brought in: checked against the CPU reference on its first use, as an imported decision is.
#pragma once

#include <cstddef>
#include <string>

#include "jitbmm/types.hpp"

namespace jitbmm {

// Every choice this process settled (choices_made), as text.
std::string export_choices();

// Stores the choices of `text` (export_choices' output) as exact decisions for the device current on this thread and
// forgets this process's choices. Returns how many were stored: a variant needing features this device lacks (another
// GPU's) is not, with a warning, so that a rank on another kind of GPU keeps its own variant there. Text that does not parse, a problem that validate()
// refuses and a spec that does not fit its problem are std::invalid_argument naming the line (checked before the
// device is looked at); nothing is stored then. Without a disk cache that can keep them (none, a read-only or untrusted
// directory, a write that fails) the decisions are not imported: std::runtime_error.
std::size_t import_choices(const std::string& text);

// A problem as one line of words, and back (strict: every field, nothing more): semiring, dtype, output dtype,
// B M K N, the three stride triples, argmax, precision.
std::string problem_text(const Problem& problem);
Problem parse_problem_text(const std::string& text);

} // namespace jitbmm
