/*
 * workload_blas.h - the --gemms flag of gputrace-workload
 * (workload_blas.c): GEMMs of known shapes through the simulated cuBLAS
 * and cuBLASLt, loaded with dlopen only when asked for.
 */
#ifndef GPUTRACE_WORKLOAD_BLAS_H
#define GPUTRACE_WORKLOAD_BLAS_H

#include "workload.h"

/* 1 if `a` was --gemms (its value in val or argv[++*i]); a counted-phase
 * flag. */
int parse_blas_flag(const char *a, const char *val, int argc, char **argv, int *i);
/* Before the workers start: loads the libraries (--gemms). */
void wblas_setup(void);
/* One pass's --gemms section. */
void wblas_pass(struct worker *w);

#endif
