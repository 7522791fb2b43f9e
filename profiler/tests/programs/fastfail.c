/* Two processes (this one and one fork) each make N failing execve of a missing file through
 * the raw syscall, as fast as they can: a load that overflows a small ring buffer, with a known
 * total of 2N + 1 exec attempts (the launch exec included) and 1 fork-family call. */
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv, char **envp) {
    char *args[] = {"missing", NULL};
    long n = argc > 1 ? atol(argv[1]) : 0;
#ifdef SYS_fork
    long child = syscall(SYS_fork);
#else /* arm64's ABI has no fork */
    long child = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
#endif
    for (long i = 0; i < n; i++)
        syscall(SYS_execve, "/nonexistent/fastfail", args, envp);
    if (child == 0)
        syscall(SYS_exit, 0);
    waitpid((int)child, NULL, 0);
    return 0;
}
