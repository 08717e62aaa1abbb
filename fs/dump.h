/*
 * fs/dump.h — gguffs --dump MODEL (or URL): the summary a mount's info
 * shows, printed to stdout, and nothing mounted (dump.c).
 */
#ifndef FS_DUMP_H
#define FS_DUMP_H

struct options;

/* The exit status: 0, or 1 after a one-line error on stderr. */
int ggfs_dump(const struct options *o);

#endif
