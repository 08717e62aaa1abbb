/*
 * fs/mountinfo.c — finding a mount in /proc/self/mountinfo (see
 * mountinfo.h).
 */
#include "mountinfo.h"

#include <stdlib.h>
#include <string.h>

/* mountinfo escapes space, tab, newline and backslash as \ooo */
static void unescape(const char *p, char *out, size_t cap)
{
    size_t k = 0;
    while (*p && k + 1 < cap) {
        if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' &&
            p[3] >= '0' && p[3] <= '7') {
            out[k++] = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
            p += 4;
        } else {
            out[k++] = *p++;
        }
    }
    out[k] = '\0';
}

long long ggfs_mountinfo_find(FILE *f, const char *fstype, const char *mountpoint,
                              char dev[32])
{
    long long id = -1;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        long long mid;
        char mp[4096], type[64], mm[32];
        if (sscanf(line, "%lld %*d %31s %*s %4095s", &mid, mm, mp) != 3)
            continue;
        const char *sep = strstr(line, " - ");
        if (!sep || sscanf(sep + 3, "%63s", type) != 1 || strcmp(type, fstype) != 0)
            continue;
        char un[4096];
        unescape(mp, un, sizeof un);
        if (strcmp(un, mountpoint) == 0) {
            id = mid;
            memcpy(dev, mm, sizeof mm);
        }
    }
    free(line);
    return id;
}

long long ggfs_mountinfo_self(const char *fstype, const char *mountpoint, char dev[32])
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -1;
    long long id = ggfs_mountinfo_find(f, fstype, mountpoint, dev);
    fclose(f);
    return id;
}
