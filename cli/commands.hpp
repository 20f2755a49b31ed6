#pragma once

#include <string>

namespace jitbmm::cli {

int run_demo(int argc, char** argv);
int run_inspect(int argc, char** argv);
int run_info(int argc, char** argv);
int run_bench(int argc, char** argv);
int run_cache(int argc, char** argv);
int run_tune(int argc, char** argv);

// The disk cache's directory as `cache path` and `info` print it, saying when $JITBMM_CACHE turns the cache off and
// when the directory there is refused (not trusted, not a directory). Throws std::invalid_argument on a malformed
// $JITBMM_CACHE or $JITBMM_CACHE_MAX_BYTES, which fail every plan.
std::string cache_dir_line();

class Args;
int run_first_call(const Args& args);       // bench --first-call
int run_chain_first_call(const Args& args); // bench --first-call --chain C
int run_compile_times(const Args& args);    // bench --compile-times
int run_backward_bench(const Args& args);   // bench --backward
int run_exp_matmul_bench(const Args& args); // bench --exp-matmul
int run_chain_bench(const Args& args);      // bench --chain
int run_chain_tune(const Args& args);       // tune --chain

} // namespace jitbmm::cli
