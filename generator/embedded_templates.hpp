// The device templates (templates/**/*.cuh), embedded into the library at build time.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace jitbmm {

struct EmbeddedTemplate {
  const char* name; // path under templates/, e.g. "core/semirings.cuh": how templates #include it
  const char* text;
};
const std::vector<EmbeddedTemplate>& embedded_templates();

// The text of one template; throws std::logic_error if the build did not embed it.
std::string_view template_text(std::string_view name);

} // namespace jitbmm
