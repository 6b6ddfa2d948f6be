// Whether this build reads and writes checkpoints: HDF5 files, so not in a
// build without HDF5 (checkpoint_none.cpp). A run asks before it trains, so
// a checkpoint it could not save is refused at the start, not at the end.
#pragma once

namespace strata {

bool checkpoint_format_available();

}  // namespace strata
