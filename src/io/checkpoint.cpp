#include "io/checkpoint.h"
