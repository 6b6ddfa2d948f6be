#include "core/arena.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace strata {

void* aligned_alloc_zeroed(size_t bytes) {
  constexpr size_t kHuge = size_t(2) << 20;
  const size_t align = bytes >= 4 * kHuge ? kHuge : 64;
  const size_t rounded = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  STRATA_CHECK(p != nullptr, "out of memory allocating ", bytes, " bytes");
  if (align == kHuge) madvise(p, rounded, MADV_HUGEPAGE);
  std::memset(p, 0, rounded);
  return p;
}

void aligned_free(void* p) { std::free(p); }

}  // namespace strata
