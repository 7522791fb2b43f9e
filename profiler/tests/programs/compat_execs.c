/* Built 32-bit (x86_64: `gcc -m32 -static`, ia32; arm64: `arm-linux-gnueabihf-gcc -static`,
 * AArch32) and 64-bit: a program's execs and forks, made with the raw syscalls (glibc's fork()
 * would be clone; arm64's own ABI has no fork, so there it is clone(SIGCHLD)), with a known
 * answer:
 *   200 execve of a missing file, 10 execveat(AT_FDCWD) of another missing file,
 *   1 execveat(9, "", AT_EMPTY_PATH) of argv[2], a file that is not executable (EACCES,
 *     named /dev/fd/9 as the kernel names such a file),
 *   5 fork() whose children exit at once,
 * then execve of argv[1], a 64-bit program: the ABI changes across that exec. */
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define EMPTY_PATH 0x1000 /* AT_EMPTY_PATH */

int main(int argc, char **argv, char **envp) {
    char *args[] = {"missing", NULL};
    if (argc < 3)
        return 2;
    for (int i = 0; i < 200; i++)
        syscall(SYS_execve, "/nonexistent/compat-missing", args, envp);
    for (int i = 0; i < 10; i++)
        syscall(SYS_execveat, AT_FDCWD, "/nonexistent/compat-missing-at", args, envp, 0);
    if (dup2(open(argv[2], O_RDONLY), 9) != 9)
        return 4;
    syscall(SYS_execveat, 9, "", args, envp, EMPTY_PATH);
    for (int i = 0; i < 5; i++) {
#ifdef SYS_fork
        long pid = syscall(SYS_fork);
#else
        long pid = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
#endif
        if (pid == 0)
            syscall(SYS_exit, 0);
        waitpid((int)pid, NULL, 0);
    }
    syscall(SYS_execve, argv[1], argv + 1, envp);
    return 3;
}
