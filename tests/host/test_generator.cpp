#include <doctest/doctest.h>

#include <regex>
#include <set>

#include "support/sha256.hpp"
#include "generator/emit_source.hpp"
#include "params.cuh"

using namespace jitbmm;

TEST_CASE("sha256 is the real SHA-256") {
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST_CASE("generated source is deterministic, self-contained and names its spec") {
  KernelSpec spec;
  const GeneratedKernel a = emit_kernel(spec), b = emit_kernel(spec);
  CHECK(a.name == b.name);
  CHECK(a.source == b.source);
  CHECK(std::regex_match(a.name, std::regex("log_f32_linear_b32x8_[0-9a-f]{8}")));
  CHECK(a.source.find("// spec: " + to_string(spec)) != std::string::npos);
  CHECK(a.source.find("extern \"C\" __global__ void __launch_bounds__(256, 1) " + a.name + "(") != std::string::npos);
  CHECK(a.source.find("#include") == std::string::npos); // templates inlined
  CHECK(a.source.find("#pragma once") == std::string::npos);
  CHECK(a.source.find("struct LogSemiring") != std::string::npos);
  CHECK(a.source.find("JITBMM_KERNEL_NAME") == std::string::npos);
  CHECK(a.source.find("sizeof(jb::BmmParams) == " + std::to_string(sizeof(jb::BmmParams))) != std::string::npos);
}

TEST_CASE("every spec field changes the kernel name; equal specs hash equally") {
  std::set<std::string> names;
  std::set<std::size_t> hashes;
  KernelSpec base;
  base.semiring = Semiring::max_plus;
  auto add = [&](const KernelSpec& s) {
    names.insert(emit_kernel(s).name);
    hashes.insert(hash_value(s));
  };
  add(base);
  KernelSpec s = base;
  s.semiring = Semiring::min_plus;
  add(s);
  s = base;
  s.dtype = s.out_dtype = DType::f64;
  add(s);
  s = base;
  s.dtype = DType::f16;
  s.out_dtype = DType::f32;
  add(s);
  s = base;
  s.with_argmax = true;
  add(s);
  s = base;
  s.block_x = 64;
  s.block_y = 4;
  add(s);
  s = base;
  s.index64 = true;
  add(s);
  CHECK(names.size() == 7);
  CHECK(hashes.size() == 7);
  KernelSpec copy = base;
  CHECK(copy == base);
  CHECK(hash_value(copy) == hash_value(base));
}

TEST_CASE("kernel names carry the readable parts") {
  KernelSpec s;
  s.semiring = Semiring::max_times;
  s.dtype = DType::bf16;
  s.out_dtype = DType::f32;
  s.with_argmax = true;
  s.index64 = true;
  CHECK(std::regex_match(emit_kernel(s).name, std::regex("max_times_bf16tof32_linear_b32x8_i64_arg_[0-9a-f]{8}")));
  CHECK(std::regex_match(emit_exp_probe().name, std::regex("probe_exp2_[0-9a-f]{8}")));
}
