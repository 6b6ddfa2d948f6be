// Gradient checks: the backward of every row of the op table (op_table.h)
// on every backend, in double, against central finite differences of the
// same backend's forward. The scalar checked is L = sum(dout . out) (+
// dscalar * the returned loss) for fixed random dout; the gradient buffers
// start non-zero, so an op that accumulates must add to them and one that
// writes ("=", the row's `assigns`) must not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "op_table.h"
#include "ops/backend.h"

using namespace strata;
using optable::Case;
using optable::Host;
using optable::Result;

TEST(Grad, EveryBackwardMatchesFiniteDifferences) {
  const auto cases = optable::op_table<double>();
  for (const Case<double>& c : cases) {
    if (!c.bwd) continue;
    SCOPED_TRACE(c.name);
    const std::vector<Host> in = optable::inputs_of(c);
    std::vector<Host> dout, base;
    for (size_t k = 0; k < c.out.size(); ++k) {
      dout.push_back(optable::random_host(c.out[k], 101 + k));
      if (!c.in_loss[k]) std::fill(dout[k].begin(), dout[k].end(), 0.0);
    }
    for (size_t k = 0; k < c.in.size(); ++k) base.push_back(optable::random_host(c.in[k], 201 + k));
    const double dscalar = c.scalar_in_loss ? 0.7 : 0.0;
    for (const std::string& name : optable::backends()) {
      SCOPED_TRACE(name);
      auto be = optable::make<double>(name);
      auto loss = [&](const std::vector<Host>& x) {
        const Result r = optable::run<double>(c, *be, x, nullptr, 0, nullptr);
        double L = 0;
        for (size_t k = 0; k < c.out.size(); ++k)
          for (size_t i = 0; i < r.out[k].size(); ++i) L += dout[k][i] * r.out[k][i];
        if (c.scalar_in_loss) L += dscalar * r.scalars[0];
        return L;
      };
      const Result an = optable::run<double>(c, *be, in, &dout, dscalar, &base);
      for (size_t k = 0; k < c.in.size(); ++k) {
        if (!c.diff[k]) continue;
        const bool assigns = k < c.assigns.size() && c.assigns[k];
        const int64_t samples = c.fd_samples > 0 ? c.fd_samples : c.in[k];
        const int64_t stride = std::max<int64_t>(1, c.in[k] / samples);
        for (int64_t i = 0; i < c.in[k]; i += stride) {
          std::vector<Host> xp = in, xm = in;
          const double h = 1e-6;
          xp[k][size_t(i)] += h;
          xm[k][size_t(i)] -= h;
          const double num = (loss(xp) - loss(xm)) / (2 * h);
          const double want = num + (assigns ? 0.0 : base[k][size_t(i)]);
          EXPECT_NEAR(an.grads[k][size_t(i)], want, 1e-6 * std::max(1.0, std::abs(num)))
              << "input " << k << " element " << i << (assigns ? " (=)" : " (+=)");
        }
      }
    }
  }
}
