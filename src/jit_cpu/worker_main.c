/*
** worker_main.c -- tc-worker, the compile worker program: libtc starts it
** with its socket on fd 3 and serves kernels to compile (worker.c).
*/
#include "jit_cpu.h"

int main(int argc, char **argv) { return jcpu_worker_main(argc, argv); }
