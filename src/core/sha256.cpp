#include "core/sha256.h"
