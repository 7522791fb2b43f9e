/* Built with `gcc -mx32 -static`: an x32 program (64-bit registers, 32-bit pointers; needs a
 * kernel booted with syscall.x32=y on Debian) that makes 3 execve of a missing file and 1 fork
 * through the x32 syscall numbers, then exits 0. execprof does not time x32 calls: it must
 * count all 4 as not traced. */
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv, char **envp) {
    char *args[] = {"missing", NULL};
    (void)argc;
    (void)argv;
    for (int i = 0; i < 3; i++)
        syscall(SYS_execve, "/nonexistent/x32-missing", args, envp);
    long pid = syscall(SYS_fork);
    if (pid == 0)
        syscall(SYS_exit, 0);
    waitpid((int)pid, NULL, 0);
    return 0;
}
