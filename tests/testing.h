// Helpers shared by the tests: deterministic random tensors, tolerance
// comparisons and central finite differences in double precision.
#pragma once

#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cpu/gemm.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/philox.h"

namespace strata::testing {

// A fresh directory under /tmp for one test, removed with its contents.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/strata_test_XXXXXX";
    if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The bf16 matmul paths this CPU runs: always the emulated one, and the
// native one where the CPU has it (strata's own detection decides).
inline std::vector<cpu::Bf16Path> bf16_paths() {
  std::vector<cpu::Bf16Path> p = {cpu::Bf16Path::Emulated};
  if (cpu::native_bf16_available()) p.push_back(cpu::Bf16Path::Native);
  return p;
}
inline const char* bf16_path_name(cpu::Bf16Path p) {
  return p == cpu::Bf16Path::Native ? "native" : "emulated";
}

// Forces a bf16 matmul path for one scope.
class ForceBf16Path {
 public:
  explicit ForceBf16Path(cpu::Bf16Path p) : saved_(cpu::bf16_path()) { cpu::set_bf16_path(p); }
  ~ForceBf16Path() { cpu::set_bf16_path(saved_); }
  ForceBf16Path(const ForceBf16Path&) = delete;
  ForceBf16Path& operator=(const ForceBf16Path&) = delete;

 private:
  cpu::Bf16Path saved_;
};

// The kernel levels this CPU and build can run: AVX2 always, AVX-512 where
// both have it.
inline std::vector<CpuLevel> cpu_levels() {
  std::vector<CpuLevel> l = {CpuLevel::Avx2};
  if (build_has_avx512_kernels() && cpu_features().x86_64_v4()) l.push_back(CpuLevel::Avx512);
  return l;
}

// Caps the kernel level for one scope.
class ForceCpuLevel {
 public:
  explicit ForceCpuLevel(CpuLevel l) : saved_(cpu_level()) { set_max_cpu_level(l); }
  ~ForceCpuLevel() { set_max_cpu_level(saved_); }
  ForceCpuLevel(const ForceCpuLevel&) = delete;
  ForceCpuLevel& operator=(const ForceCpuLevel&) = delete;

 private:
  CpuLevel saved_;
};

// Uniform in [-scale, scale), reproducible from (seed, stream).
template <typename T>
std::vector<T> random_vec(int64_t n, uint32_t stream, double scale = 1.0, uint64_t seed = 42) {
  const PhiloxStream rng(seed, 99, stream);
  std::vector<T> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = T((rng.uniform(uint64_t(i)) * 2 - 1) * scale);
  return v;
}

template <typename A, typename B>
std::vector<A> cast_vec(const std::vector<B>& v) {
  return std::vector<A>(v.begin(), v.end());
}

inline std::vector<int32_t> random_tokens(int64_t n, int V, uint32_t stream) {
  const PhiloxStream rng(7, 98, stream);
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = int32_t(rng.uniform(uint64_t(i)) * V) % V;
  return t;
}

// Asserts |got - want| <= atol + rtol * max|want| elementwise, reporting the
// worst element.
template <typename A, typename B>
void expect_close(const A* got, const B* want, int64_t n, double rtol, double atol,
                  const std::string& what) {
  double scale = 0;
  for (int64_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(double(want[i])));
  double worst = -1;
  int64_t at = -1;
  for (int64_t i = 0; i < n; ++i) {
    const double d = std::fabs(double(got[i]) - double(want[i]));
    if (!(d <= atol + rtol * scale) && (at < 0 || d > worst || std::isnan(d))) {
      worst = d;
      at = i;
    }
  }
  EXPECT_LT(at, 0) << what << ": element " << at << " is " << (at >= 0 ? double(got[at]) : 0)
                   << ", expected " << (at >= 0 ? double(want[at]) : 0) << " (|diff| " << worst
                   << ", tolerance " << atol + rtol * scale << ", n=" << n << ")";
}

template <typename A, typename B>
void expect_close(const std::vector<A>& got, const std::vector<B>& want, double rtol, double atol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  expect_close(got.data(), want.data(), int64_t(got.size()), rtol, atol, what);
}

// Central differences of the scalar `loss` with respect to x[i] for the given
// indices (all when `indices` is empty), compared with `analytic`:
//   |analytic - numeric| <= tol * max(1, |numeric|).
inline void expect_gradient(const std::function<double()>& loss, double* x, int64_t n,
                            const double* analytic, const std::string& what, double tol = 1e-6,
                            double h = 1e-5, std::vector<int64_t> indices = {}) {
  if (indices.empty())
    for (int64_t i = 0; i < n; ++i) indices.push_back(i);
  int failures = 0;
  for (int64_t i : indices) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    const double numeric = (up - down) / (2 * h);
    const double err = std::fabs(analytic[i] - numeric);
    if (!(err <= tol * std::max(1.0, std::fabs(numeric))) && failures++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: analytic " << analytic[i] << ", numeric " << numeric
                    << " (|diff| " << err << ")";
  }
  EXPECT_EQ(failures, 0) << what << ": " << failures << " of " << indices.size()
                         << " gradient entries differ";
}

// Up to k distinct indices in [0, n), spread deterministically.
inline std::vector<int64_t> sample_indices(int64_t n, int64_t k, uint32_t stream) {
  if (n <= k) {
    std::vector<int64_t> all(n);
    for (int64_t i = 0; i < n; ++i) all[i] = i;
    return all;
  }
  const PhiloxStream rng(3, 97, stream);
  std::vector<int64_t> out;
  for (int64_t i = 0; int64_t(out.size()) < k; ++i) {
    const int64_t j = int64_t(rng.uniform(uint64_t(i)) * double(n)) % n;
    if (std::find(out.begin(), out.end(), j) == out.end()) out.push_back(j);
  }
  return out;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// ---------------------------------------------------------------- errors

// The message of the strata::Error that fn throws ("" if it throws none).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The message of the strata::Error that fn throws; a test failure when fn
// throws nothing or another exception.
inline std::string thrown_message(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected strata::Error, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected an error";
  return "";
}

// A non-empty one-line message that contains each of `parts`.
inline void expect_one_line(const std::string& msg, std::initializer_list<std::string> parts) {
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
  EXPECT_FALSE(msg.empty());
  for (const auto& p : parts)
    EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' missing from: " << msg;
}

}  // namespace strata::testing

// EXPECT_ERROR(stmt, parts...): stmt throws a strata::Error whose message is
// one line and contains every part.
#define EXPECT_ERROR(stmt, ...)                                                      \
  do {                                                                               \
    const std::string msg_ = ::strata::testing::error_of([&] { stmt; });             \
    EXPECT_FALSE(msg_.empty()) << #stmt " did not throw strata::Error";              \
    EXPECT_EQ(msg_.find('\n'), std::string::npos) << msg_;                           \
    for (const std::string& part_ : std::initializer_list<std::string>{__VA_ARGS__}) \
      EXPECT_NE(msg_.find(part_), std::string::npos)                                 \
          << "error '" << msg_ << "' does not mention '" << part_ << "'";            \
  } while (0)
