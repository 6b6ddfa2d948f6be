#include "data/tokenizer.h"
