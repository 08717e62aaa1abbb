/* kernels/cpu.c — GGFS_DISABLE_CPU_FEATURES (see cpu.h). */
#include "cpu.h"

#include <stdlib.h>
#include <string.h>

#ifdef GGFS_TEST_SUPPORT
/* true if name appears in the comma-separated list (or the list is "all"). */
static bool listed(const char *list, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if ((n == len && strncmp(p, name, n) == 0) ||
            (n == 3 && strncmp(p, "all", 3) == 0))
            return true;
        if (!end)
            break;
        p = end + 1;
    }
    return false;
}

bool ggfs_cpu_disabled(const char *name)
{
    const char *off = getenv("GGFS_DISABLE_CPU_FEATURES");
    return off && listed(off, name);
}
#else
bool ggfs_cpu_disabled(const char *name)
{
    (void)name;
    return false;
}
#endif
