/* `cargo xtask overhead`'s unrelated-syscall loop: N raw getpid calls, timed with
 * the process's own CPU clock (CLOCK_PROCESS_CPUTIME_ID: what runs in its context, the probes
 * a tracer runs on its syscalls included, not other processes sharing the CPU) around the
 * loop; prints the nanoseconds per call. Under QEMU's -icount shift=0 a guest nanosecond is
 * one instruction: it prints instructions per call.
 * Built static (the lab's guest has no C library). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000;
    struct timespec a, b;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
    for (long i = 0; i < n; i++)
        syscall(SYS_getpid);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
    double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
    printf("%.1f\n", ns / n);
    return 0;
}
