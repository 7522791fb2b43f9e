/* Built with `arm-linux-gnueabihf-gcc -static`: AArch32 syscalls whose numbers are arm64's exec
 * and fork numbers (221 fcntl64, 281 socket, 220 madvise, with bad arguments), 100 each.
 * None is an exec or a fork: execprof must count only the launch exec. (435, clone3, is the
 * same call in both ABIs.) */
#include <unistd.h>
#include <sys/syscall.h>

int main(void) {
    for (int i = 0; i < 100; i++) {
        syscall(221, -1, 0);         /* fcntl64(-1, F_DUPFD): EBADF (arm64: execve) */
        syscall(281, -1, -1, -1);    /* socket(-1, -1, -1): EAFNOSUPPORT (arm64: execveat) */
        syscall(220, 1, 4096, -1);   /* madvise(1, 4096, -1): EINVAL (arm64: clone) */
    }
    return 0;
}
