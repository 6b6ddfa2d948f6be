#include "train/recipe.h"
