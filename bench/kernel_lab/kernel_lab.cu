// The kernel lab on the GPU: the same source as the SIMT build, through nvcc.
#include "bench/kernel_lab/kernel_lab.cpp"
