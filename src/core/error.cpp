#include "core/error.h"

#include <exception>
#include <utility>

namespace strata {

void fail(const std::string& msg) { throw Error(msg); }

namespace {
thread_local const Activity* innermost = nullptr;
thread_local std::string left_by_exception;
}  // namespace

Activity::Activity(std::string what)
    : what_(std::move(what)), outer_(innermost), uncaught_(std::uncaught_exceptions()) {
  if (!outer_) left_by_exception.clear();
  innermost = this;
}

Activity::~Activity() {
  innermost = outer_;
  if (std::uncaught_exceptions() > uncaught_ && left_by_exception.empty())
    left_by_exception = what_;
}

std::string Activity::unwound() { return left_by_exception; }

}  // namespace strata
