#pragma once

namespace jitbmm::cli {

int run_demo(int argc, char** argv);
int run_inspect(int argc, char** argv);
int run_info(int argc, char** argv);
int run_bench(int argc, char** argv);
int run_cache(int argc, char** argv);
int run_tune(int argc, char** argv);

} // namespace jitbmm::cli
