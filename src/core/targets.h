// Targets of a language-model loss: the id that marks a position without one.
// Data makes such targets (prompt tokens of SFT, padding) and the ops skip
// them, so the constant lives below both.
#pragma once

#include <cstdint>

namespace strata {

// Targets equal to this are ignored by the cross-entropy (as in PyTorch / HF).
inline constexpr int32_t kIgnoreIndex = -100;

}  // namespace strata
