#include "data/sft.h"
