/* `execve_check N EXE NOEXEC`: N AT_EXECVE_CHECK checks of the executable EXE and one of the
 * non-executable NOEXEC, each through execveat(fd, "", AT_EMPTY_PATH | AT_EXECVE_CHECK)
 * (Linux 6.14+), then it copies itself into a memfd named "execprof-memfd" and fexecve's
 * it as `execve_check child`, which makes one failing execve and exits: a known answer of
 * N checks passed, 1 failed (EACCES), 1 fexecve (from 6.14 the new comm is the file's name,
 * "memfd:execprof-", before it the fd number) and 1 ENOENT made by the memfd's image.
 * Exits 2 when a check's answer is not the expected one. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef AT_EXECVE_CHECK
#define AT_EXECVE_CHECK 0x10000
#endif

static long check(const char *path, char **envp) {
    char *args[] = {"checked", NULL};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        perror(path);
        exit(2);
    }
    long r = syscall(SYS_execveat, fd, "", args, envp, AT_EMPTY_PATH | AT_EXECVE_CHECK);
    close(fd);
    return r;
}

int main(int argc, char **argv, char **envp) {
    if (argc == 2 && strcmp(argv[1], "child") == 0) {
        char *args[] = {"missing", NULL};
        syscall(SYS_execve, "/nonexistent/after-memfd", args, envp);
        return 0;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: execve_check N EXE NOEXEC\n");
        return 2;
    }
    long n = atol(argv[1]);
    for (long i = 0; i < n; i++)
        if (check(argv[2], envp) != 0) {
            perror("AT_EXECVE_CHECK of the executable");
            return 2;
        }
    if (check(argv[3], envp) == 0) {
        fprintf(stderr, "AT_EXECVE_CHECK passed a file without execute permission\n");
        return 2;
    }
    int self = open("/proc/self/exe", O_RDONLY);
    int mem = memfd_create("execprof-memfd", 0);
    struct stat st;
    if (self < 0 || mem < 0 || fstat(self, &st) != 0 || sendfile(mem, self, NULL, st.st_size) != st.st_size) {
        perror("copying into a memfd");
        return 2;
    }
    char *args[] = {"execve_check", "child", NULL};
    fexecve(mem, args, envp);
    perror("fexecve");
    return 2;
}
