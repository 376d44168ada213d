// Holds a process with PTRACE_SEIZE (without stopping it) until its stdin
// closes, so that the process shows as traced by someone else.
#include <stdio.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) return 1;
    if (ptrace(PTRACE_SEIZE, atoi(argv[1]), 0, 0) != 0) {
        perror("PTRACE_SEIZE");
        return 1;
    }
    printf("held\n");
    fflush(stdout);
    char buf[16];
    while (read(0, buf, sizeof buf) > 0) {
    }
    return 0;
}
