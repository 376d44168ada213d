/*
 * holdpipe.c - linked into the hostile libcuda variant only
 * ($(OUT)/holdpipe/libcuda.so.1).  When the library is loaded by gputrace's
 * calibration helper (a process whose command line holds "__calibrate"),
 * its constructor leaves a double-forked descendant in a session of its own
 * (setsid), named "simhold", that keeps the helper's stdout and stderr
 * open and sleeps 600 s: what a driver's daemon, or a hostile library,
 * could do.  Anywhere else (the workload) it does nothing.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static int in_calibration_helper(void)
{
    char buf[4096];
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    static const char needle[] = "__calibrate";
    for (ssize_t i = 0; n > 0 && i + (ssize_t)sizeof needle - 1 <= n; i++)
        if (memcmp(buf + i, needle, sizeof needle - 1) == 0)
            return 1;
    return 0;
}

__attribute__((constructor)) static void sim_hold_pipe(void)
{
    if (!in_calibration_helper())
        return;
    pid_t first = fork();
    if (first == 0) {
        if (fork() == 0) {
            setsid();
            prctl(PR_SET_NAME, "simhold", 0, 0, 0);
            sleep(600);
            _exit(0);
        }
        _exit(0);
    }
    if (first > 0)
        waitpid(first, NULL, 0);
}
