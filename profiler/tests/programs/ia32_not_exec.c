/* Built with `gcc -m32 -static`: ia32 syscalls whose numbers are x86_64's exec and fork
 * numbers (59 oldolduname, 322 timerfd_create, 56/57/58 and 435 clone3 with bad arguments),
 * 100 each. None is an exec or a fork: execprof must count only the launch exec. */
#include <unistd.h>
#include <sys/syscall.h>

int main(void) {
    for (int i = 0; i < 100; i++) {
        syscall(59, 0);           /* oldolduname(NULL): EFAULT */
        long fd = syscall(322, -1, 0); /* timerfd_create(-1, 0): EINVAL */
        if (fd >= 0)
            close((int)fd);
        syscall(56, 0, 0);        /* ia32 56: mpx, not implemented: ENOSYS */
        syscall(57, -1, -1);      /* setpgid(-1, -1): EINVAL */
        syscall(58, 0, 0);        /* ulimit, not implemented: ENOSYS */
    }
    return 0;
}
