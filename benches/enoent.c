/* `cargo xtask overhead`'s failed-attempt loop: N execve calls of PATH, a missing name in an
 * existing directory (each fails with ENOENT), timed with the process's own CPU clock
 * (CLOCK_PROCESS_CPUTIME_ID: what runs in its context, a tracer's probes included, not the
 * tracer's user space reading their records on the same CPU) around the loop; writes the
 * nanoseconds per call to OUT. Under QEMU's -icount shift=0 a guest nanosecond is
 * one instruction: instructions per failed attempt, the tracer's probes included when one
 * watches this process. Built static (the lab's guest has no C library). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: enoent N PATH OUT (N failed execve calls of the missing PATH)\n");
        return 2;
    }
    long n = atol(argv[1]);
    char *path = argv[2];
    char *args[] = {path, NULL};
    char *env[] = {NULL};
    struct timespec a, b;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
    for (long i = 0; i < n; i++) {
        if (syscall(SYS_execve, path, args, env) != -1 || errno != ENOENT) {
            fprintf(stderr, "enoent: execve(%s) did not fail with ENOENT: pick a missing name\n", path);
            return 1;
        }
    }
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
    double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
    FILE *out = fopen(argv[3], "w");
    if (!out || fprintf(out, "%.1f\n", n > 0 ? ns / n : 0.0) < 0 || fclose(out) != 0) {
        perror(argv[3]);
        return 1;
    }
    return 0;
}
