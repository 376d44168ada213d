/*
 * workload_cupti.h - the CUPTI and agent flags of gputrace-workload
 * (workload_cupti.c): mapping and subscribing the simulated libcupti,
 * loading gputrace's agent library and starting it without an injector,
 * and the --varied launch section.  README.md ("CUPTI and the agent") is
 * the contract.
 */
#ifndef GPUTRACE_WORKLOAD_CUPTI_H
#define GPUTRACE_WORKLOAD_CUPTI_H

#include "workload.h"

struct cupti_opts {
    uint64_t varied;          /* --varied N */
    int map_cupti;            /* --map-cupti */
    int subscribe_cupti;      /* --subscribe-cupti */
    const char *agent;        /* --load-agent PATH */
    const char *agent_cupti;  /* --agent-cupti PATH */
    uint64_t kinds, ring, names, flush_ms, hello_ms, finalize_ms, buffers, buffer_size;
    int agent_join;           /* --agent-join */
    int cupti_report;         /* --cupti-report */
    int end_wait;             /* --wait-stdin-end */
    int fork_child;           /* --fork-child */
    uint64_t end_launches;    /* --end-launches N */
    int take_cupti;           /* --take-cupti */
};

extern struct cupti_opts copt;

/* 1 if `a` was one of the flags (value in val or argv[++*i]); *counted is
 * set for a counted-phase flag (--varied). */
int parse_cupti_flag(const char *a, const char *val, int argc, char **argv, int *i, int *counted);
/* First thing after parsing: --map-cupti, --subscribe-cupti. */
void wcupti_setup(void);
/* After the ready lines, before the wait: --load-agent. */
void wcupti_start_agent(void);
/* As the workers go: --take-cupti's thread. */
void wcupti_take_start(void);
/* One pass's --varied section. */
void wcupti_pass(struct worker *w);
/* After the workers finished, before teardown: --fork-child,
 * --wait-stdin-end, --end-launches. */
void wcupti_end_wait(void);
/* Before `done`: window lines, --agent-join, --cupti-report. */
void wcupti_report(void);

#endif /* GPUTRACE_WORKLOAD_CUPTI_H */
