#include "data/loader.h"
