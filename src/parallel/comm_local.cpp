// The single-process communicator: a group of one, so every collective is the
// identity (allgather copies `in` to `out`, broadcast and the sums leave their
// values as they are).
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "parallel/comm.h"

namespace strata {
namespace {

class LocalComm final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "local"; }

  void allreduce_sum(float*, int64_t n) override { check_count(n, "allreduce_sum"); }
  bool bf16_sums() const override { return true; }
  void allreduce_sum_bf16(uint16_t*, int64_t n) override { check_count(n, "allreduce_sum_bf16"); }
  int64_t allreduce_sum_bf16_async(uint16_t*, int64_t n) override {
    check_count(n, "allreduce_sum_bf16_async");
    return 0;
  }
  int64_t allreduce_sum_async(float*, int64_t n) override {
    check_count(n, "allreduce_sum_async");
    return next_handle_++;
  }
  void wait(int64_t handle) override {
    STRATA_CHECK(handle >= 0 && handle < next_handle_,
                 "local communicator: wait on unknown handle ", handle);
  }
  void progress() override {}
  void allgather(const float* in, float* out, int64_t n) override {
    check_count(n, "allgather");
    if (n > 0 && in != out) std::memmove(out, in, static_cast<size_t>(n) * sizeof(float));
  }
  int64_t allgather_async(const float* in, float* out, int64_t n) override {
    allgather(in, out, n);
    return next_handle_++;
  }
  void reduce_scatter_sum(const float* in, float* out, int64_t n) override {
    check_count(n, "reduce_scatter_sum");
    if (n > 0 && in != out) std::memmove(out, in, static_cast<size_t>(n) * sizeof(float));
  }
  int64_t reduce_scatter_sum_async(const float* in, float* out, int64_t n) override {
    reduce_scatter_sum(in, out, n);
    return next_handle_++;
  }
  void broadcast(float*, int64_t n, int root) override {
    check_count(n, "broadcast");
    check_root(root);
  }
  void broadcast_bytes(std::string&, int root) override { check_root(root); }
  double allreduce_sum(double x) override { return x; }
  int64_t allreduce_sum(int64_t x) override { return x; }
  void barrier() override {}
  [[noreturn]] void abort(const std::string& why) override {
    std::fprintf(stderr, "strata: error: %s\n", why.c_str());
    std::fflush(stderr);
    std::exit(1);
  }

 private:
  static void check_count(int64_t n, const char* what) {
    STRATA_CHECK(n >= 0, "local communicator: ", what, " with a negative count ", n);
  }
  static void check_root(int root) {
    STRATA_CHECK(root == 0, "local communicator: broadcast root ", root, " outside a group of 1");
  }
  int64_t next_handle_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> make_local_comm() { return std::make_unique<LocalComm>(); }

// (The base class's: a communicator without bf16 sums.)
void Communicator::allreduce_sum_bf16(uint16_t*, int64_t) {
  fail(cat(name(), " communicator: no bf16 sums (sum fp32 copies)"));
}
int64_t Communicator::allreduce_sum_bf16_async(uint16_t*, int64_t) {
  fail(cat(name(), " communicator: no bf16 sums (sum fp32 copies)"));
}

int64_t Communicator::send_async(const float*, int64_t, int peer) {
  fail(cat(name(), " communicator of ", size(), " process(es): no point-to-point send (to rank ",
           peer, ")"));
}
int64_t Communicator::recv_async(float*, int64_t, int peer) {
  fail(cat(name(), " communicator of ", size(),
           " process(es): no point-to-point receive (from "
           "rank ",
           peer, ")"));
}

}  // namespace strata
