// A library whose dlopen(RTLD_NOW) fails in the victim: it needs a symbol
// that nothing provides. Its constructor must never run.
#include <stdio.h>
#include <stdlib.h>

extern int gputrace_missing_function(void);

__attribute__((constructor)) static void bad_init(void) {
    const char *path = getenv("PROBE_MARKER");
    FILE *f = path ? fopen(path, "a") : NULL;
    if (f) {
        fputs("bad constructor ran\n", f);
        fclose(f);
    }
}

int bad_entry(void) { return gputrace_missing_function(); }
