// A JITBMM_* variable that turns something on or off: off, 0, false or no; on, 1, true or yes (any case); empty or
// unset gives the default. Anything else throws std::invalid_argument naming the variable and the value.
#pragma once

namespace jitbmm {

bool env_switch(const char* name, bool default_value);

} // namespace jitbmm
