/*
 * The unprivileged process of the security tests: maps the booby-trapped
 * libcuda.so.1 of its own directory (DT_NEEDED, RUNPATH $ORIGIN), says
 * "ready", and waits until its stdin closes.
 */
#include <stdio.h>
#include <unistd.h>

int cuInit(unsigned int flags);

int main(void)
{
    cuInit(0);
    printf("ready pid=%d uid=%d\n", (int)getpid(), (int)getuid());
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
    return 0;
}
