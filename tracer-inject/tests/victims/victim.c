// Victim processes for the tracer-inject tests. One program, the mode in argv[1]:
//
//   sleep            loop of 10 ms nanosleeps; prints "tick N intr I" after each
//   read             prints "ready", blocks in read(0, 64 bytes), prints "got N: DATA"
//   longsleep MS     one nanosleep of MS ms; prints "slept ELAPSED_MS ret R"
//   spin MS          prints "spinning", spins MS ms in user code only, then as sleep
//   signals          as sleep, counting SIGUSR1 in a handler: "tick N sig S"
//   threads          3 futex waiters + 1 busy thread; "tick N f0 f1 f2 busy B"
//   exit-after MS    as sleep; a spinning thread calls _exit(7) after MS ms
//   seccomp-kill     filter kills the process on memfd_create, then as sleep
//   seccomp-clone3   filter fails clone3 with ENOSYS (like Docker), then as sleep
//
// The system calls of the loops are made with inline asm that loads known
// patterns into rbx, r8-r10, r14, r15, xmm0-15 and MXCSR before `syscall` and
// checks them after: an injection that does not restore registers and the
// FP state exactly, or restarts the interrupted call wrongly, makes the
// victim print "BAD ..." and exit 2.
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/futex.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void bad(const char *what, long v) {
    printf("BAD %s %ld\n", what, v);
    fflush(stdout);
    _exit(2);
}

#ifdef __x86_64__
static long checked_syscall4(long nr, long a1, long a2, long a3, long a4) {
    static __thread uint64_t seed = 0x9e3779b97f4a7c15ull;
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    uint8_t xin[256] __attribute__((aligned(16))), xout[256] __attribute__((aligned(16)));
    for (int i = 0; i < 256; i++) xin[i] = (uint8_t)(seed >> (i % 56)) ^ (uint8_t)i;
    unsigned mx_in = 0x1f80 | (3u << 13), mx_out = 0; // round toward zero
    const long p_rbx = (long)(seed ^ 0x1111), p8 = (long)(seed ^ 0x8888), p9 = (long)(seed ^ 0x9999);
    const long p10 = a4, p14 = (long)(seed ^ 0xeeee), p15 = (long)(seed ^ 0xffff);
    register long rax __asm__("rax") = nr;
    register long rdi __asm__("rdi") = a1;
    register long rsi __asm__("rsi") = a2;
    register long rdx __asm__("rdx") = a3;
    register long r8 __asm__("r8") = p8;
    register long r9 __asm__("r9") = p9;
    register long r10 __asm__("r10") = p10;
    register long r14 __asm__("r14") = p14;
    register long r15 __asm__("r15") = p15;
    long rbx = p_rbx;
#define LD(n) "movdqu " #n "*16(%[xin]), %%xmm" #n "\n\t"
#define ST(n) "movdqu %%xmm" #n ", " #n "*16(%[xout])\n\t"
    __asm__ volatile(
        "ldmxcsr %[mxin]\n\t"
        LD(0) LD(1) LD(2) LD(3) LD(4) LD(5) LD(6) LD(7)
        LD(8) LD(9) LD(10) LD(11) LD(12) LD(13) LD(14) LD(15)
        "syscall\n\t"
        ST(0) ST(1) ST(2) ST(3) ST(4) ST(5) ST(6) ST(7)
        ST(8) ST(9) ST(10) ST(11) ST(12) ST(13) ST(14) ST(15)
        "stmxcsr %[mxout]\n\t"
        "ldmxcsr %[mxdef]\n\t"
        : "+a"(rax), "+D"(rdi), "+S"(rsi), "+d"(rdx), "+r"(r8), "+r"(r9), "+r"(r10),
          "+r"(r14), "+r"(r15), "+b"(rbx), [mxout] "=m"(mx_out)
        : [xin] "r"(xin), [xout] "r"(xout), [mxin] "m"(mx_in), [mxdef] "m"((unsigned){0x1f80})
        : "rcx", "r11", "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6",
          "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
    // Copy out of the register variables before any call can clobber them.
    const long ret = rax, o_rdi = rdi, o_rsi = rsi, o_rdx = rdx, o8 = r8, o9 = r9, o10 = r10;
    const long o14 = r14, o15 = r15, o_rbx = rbx;
    if (o_rdi != a1 || o_rsi != a2 || o_rdx != a3) bad("syscall args changed", nr);
    if (o_rbx != p_rbx || o8 != p8 || o9 != p9 || o10 != p10 || o14 != p14 || o15 != p15)
        bad("general register changed", nr);
    if (memcmp(xin, xout, sizeof xin) != 0) bad("xmm register changed", nr);
    if (mx_out != mx_in) bad("mxcsr changed", (long)mx_out);
    return ret;
}
#else
static long checked_syscall4(long nr, long a1, long a2, long a3, long a4) {
    long r = syscall(nr, a1, a2, a3, a4);
    return r < 0 ? -errno : r;
}
#endif

static long checked_syscall(long nr, long a1, long a2, long a3) {
    return checked_syscall4(nr, a1, a2, a3, (long)0x5a5a5a5a5a5a5a5aULL);
}

static long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void spin_ms(long ms) {
    long end = now_ms() + ms;
    while (now_ms() < end) {
    }
}

static volatile sig_atomic_t sigusr1_count;
static void on_sigusr1(int sig) {
    (void)sig;
    sigusr1_count++;
}

static void sleep_loop(int with_signals) {
    long intr = 0;
    for (long tick = 1;; tick++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        long r = checked_syscall(SYS_nanosleep, (long)&ts, 0, 0);
        if (r == -EINTR)
            intr++;
        else if (r != 0)
            bad("nanosleep returned", r);
        if (with_signals)
            printf("tick %ld sig %ld\n", tick, (long)sigusr1_count);
        else
            printf("tick %ld intr %ld\n", tick, intr);
    }
}

static void *exit_thread(void *arg) {
    spin_ms((long)arg);
    _exit(7);
    return NULL;
}

// Futex waiters: 0 and 1 wait with a 20 ms timeout on a word nobody changes,
// 2 waits without timeout and is woken by main. Any result but the expected
// one (ETIMEDOUT; 0 for the woken one) is a bug, EINTR included.
static uint32_t futex_words[3];
static volatile long futex_counts[3], busy_count;
static void *futex_thread(void *arg) {
    long i = (long)arg;
    for (;;) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        long timeout = i < 2 ? (long)&ts : 0;
        long r = checked_syscall4(SYS_futex, (long)&futex_words[i], FUTEX_WAIT_PRIVATE, 0, timeout);
        if (i < 2 && r != -ETIMEDOUT) bad("timed futex wait", r);
        if (i == 2 && r != 0) bad("futex wait", r);
        futex_counts[i]++;
    }
    return NULL;
}
static void *busy_thread(void *arg) {
    (void)arg;
    for (;;) busy_count++;
    return NULL;
}

static void threads_main(void) {
    pthread_t t;
    for (long i = 0; i < 3; i++) pthread_create(&t, NULL, futex_thread, (void *)i);
    pthread_create(&t, NULL, busy_thread, NULL);
    for (long tick = 1;; tick++) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        long r = checked_syscall(SYS_nanosleep, (long)&ts, 0, 0);
        if (r != 0) bad("nanosleep returned", r);
        syscall(SYS_futex, &futex_words[2], FUTEX_WAKE_PRIVATE, 1);
        printf("tick %ld f0 %ld f1 %ld f2 %ld busy %ld\n", tick, futex_counts[0], futex_counts[1],
               futex_counts[2], busy_count);
    }
}

static void install_filter(int nr, unsigned action) {
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0xc000003e /* AUDIT_ARCH_X86_64 */, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, action),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof f / sizeof f[0], f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) bad("no_new_privs", errno);
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) bad("seccomp", errno);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "sleep";
    long arg = argc > 2 ? atol(argv[2]) : 0;
    if (!strcmp(mode, "sleep")) {
        sleep_loop(0);
    } else if (!strcmp(mode, "read")) {
        char buf[64];
        printf("ready\n");
        long r = checked_syscall(SYS_read, 0, (long)buf, sizeof buf);
        printf("got %ld: %.*s\n", r, r > 0 ? (int)r : 0, buf);
    } else if (!strcmp(mode, "longsleep")) {
        struct timespec ts = {arg / 1000, (arg % 1000) * 1000000};
        printf("sleeping\n");
        long t0 = now_ms();
        long r = checked_syscall(SYS_nanosleep, (long)&ts, 0, 0);
        printf("slept %ld ret %ld\n", now_ms() - t0, r);
    } else if (!strcmp(mode, "spin")) {
        printf("spinning\n");
        spin_ms(arg);
        sleep_loop(0);
    } else if (!strcmp(mode, "signals")) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigusr1;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGUSR1, &sa, NULL);
        printf("handler ready\n");
        sleep_loop(1);
    } else if (!strcmp(mode, "threads")) {
        threads_main();
    } else if (!strcmp(mode, "exit-after")) {
        pthread_t t;
        pthread_create(&t, NULL, exit_thread, (void *)arg);
        sleep_loop(0);
    } else if (!strcmp(mode, "seccomp-kill")) {
        install_filter(SYS_memfd_create, SECCOMP_RET_KILL_PROCESS);
        printf("filtered\n");
        sleep_loop(0);
    } else if (!strcmp(mode, "seccomp-clone3")) {
        install_filter(435 /* clone3 */, SECCOMP_RET_ERRNO | ENOSYS);
        printf("filtered\n");
        sleep_loop(0);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 1;
    }
    return 0;
}
