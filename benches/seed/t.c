#include <unistd.h>
#include <stdlib.h>
#include <stdio.h>

int main(int argc, char **argv, char **envp)
{
	char buffer[12];
	int n;

	if (argc != 2)
		return 1;
	n = atoi(argv[1]);
	if (n <= 0)
		return 0;
	snprintf(buffer, sizeof(buffer), "%d", n-1);
	argv[1] = buffer;
	execvpe("t", argv, envp);
	return 3;
}
