/* A process that runs for a long time (built 32-bit: traced from before with --pid). */
#include <unistd.h>

int main(void) {
    sleep(1000);
    return 0;
}
