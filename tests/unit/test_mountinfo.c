/*
 * tests/unit/test_mountinfo.c — fs/mountinfo.c on made-up mountinfo files:
 * the newest mount of the type on the mount point wins, escapes are undone
 * before comparing, other types and lines that do not parse are skipped,
 * nothing found leaves dev as it was.
 */
#include "fs/mountinfo.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

static long long find(const char *text, const char *type, const char *mp, char dev[32])
{
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    assert_non_null(f);
    long long id = ggfs_mountinfo_find(f, type, mp, dev);
    fclose(f);
    return id;
}

static void test_find(void **state)
{
    (void)state;
    const char *text =
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        "40 22 0:41 / /mnt/m rw,nosuid - fuse.gguffs model.gguf rw,user_id=0\n"
        "garbage line\n"
        "41 22 0:42 / /mnt/m rw,nosuid - fuse.other x rw\n"
        "42 22 0:43 / /mnt/m rw,nosuid - fuse.gguffs model.gguf rw,user_id=0\n"
        "43 22 0:44 / /mnt/a\\040b\\134c rw - fuse.gguffs m rw\n"
        "44 22 0:45 / /mnt/no-separator rw fuse.gguffs m rw\n";
    char dev[32] = "unset";
    /* the newest of two */
    assert_int_equal(find(text, "fuse.gguffs", "/mnt/m", dev), 42);
    assert_string_equal(dev, "0:43");
    /* another type on the same point */
    assert_int_equal(find(text, "fuse.other", "/mnt/m", dev), 41);
    assert_string_equal(dev, "0:42");
    /* escaped: a space and a backslash */
    assert_int_equal(find(text, "fuse.gguffs", "/mnt/a b\\c", dev), 43);
    assert_string_equal(dev, "0:44");
    /* not found: dev untouched */
    strcpy(dev, "unset");
    assert_int_equal(find(text, "fuse.gguffs", "/mnt/a\\040b\\134c", dev), -1);
    assert_int_equal(find(text, "fuse.gguffs", "/mnt/no-separator", dev), -1);
    assert_int_equal(find(text, "fuse.gguffs", "/mnt", dev), -1);
    assert_int_equal(find("", "fuse.gguffs", "/mnt/m", dev), -1);
    assert_string_equal(dev, "unset");
}

/* A device field too long, a mount point past 4095 bytes: no overflow,
 * no match. */
static void test_hostile(void **state)
{
    (void)state;
    static char text[16384];
    char longdev[100], longmp[6000];
    memset(longdev, '7', sizeof longdev - 1);
    longdev[sizeof longdev - 1] = '\0';
    memset(longmp, 'x', sizeof longmp - 1);
    longmp[0] = '/';
    longmp[sizeof longmp - 1] = '\0';
    snprintf(text, sizeof text, "50 1 %s / /mnt/m rw - fuse.gguffs m rw\n"
             "51 1 0:9 / %s rw - fuse.gguffs m rw\n", longdev, longmp);
    char dev[32] = "unset";
    assert_int_equal(find(text, "fuse.gguffs", longmp, dev), -1);
    assert_string_equal(dev, "unset");
    long long id = find(text, "fuse.gguffs", "/mnt/m", dev);
    /* the device is cut at 31 bytes, so the line does not parse as one */
    assert_true(id == -1 || id == 50);
    assert_true(strlen(dev) < sizeof dev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_find),
        cmocka_unit_test(test_hostile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
