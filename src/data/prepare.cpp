#include "data/shards.h"
