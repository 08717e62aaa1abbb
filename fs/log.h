/*
 * fs/log.h — where gguffs's messages go once it runs.
 *
 * Every message after the model is opened goes through fuse_log() (libfuse's
 * own too), whose handler is installed here:
 *   - before daemonizing, and with -f: stderr, as the line was written;
 *   - once daemonized (stderr is /dev/null then): syslog (ident "gguffs",
 *     LOG_PID, facility LOG_USER), each line naming the mount point;
 *   - with -o log_file=FILE, also (daemonized: instead) appended to FILE
 *     (created with mode 0600, O_APPEND), one line per message:
 *     "2026-01-02T03:04:05Z gguffs[PID]: MOUNTPOINT: message".
 * Repeated messages are rate-limited: at most LOG_BURST a second of each
 * kind (each call site's format), then one line saying how many were
 * suppressed, so that a broken server or a looping script cannot flood the
 * log.
 *
 * Once the mount is made (ggfs_log_keep), every line is also kept, for
 * the file `log` at the mount's root: the last LOG_KEEP lines, each
 * "2026-01-02T03:04:05Z message\n" (a newline or CR inside a message is a
 * space), whatever else receives them.  So a refused edit's reason can be
 * read where every user of the mount can look, with no syslog daemon
 * (containers) and no -o log_file.  Memory: at most LOG_KEEP lines of at
 * most LOG_LINE_MAX bytes.
 *
 * Locks: one mutex of its own, taken last (core/mount.h): nothing else is locked
 * or waited for while it is held.
 */
#ifndef FS_LOG_H
#define FS_LOG_H

#include <stdbool.h>

#define LOG_BURST 20
/* lines the log file keeps, and the most bytes of one (its newline too) */
#define LOG_KEEP 200
#define LOG_LINE_MAX 2048

/* Installs the handler; opens log_file (may be NULL).  false after a
 * one-line error on stderr (log_file cannot be opened). */
bool ggfs_log_open(const char *mountpoint, const char *log_file);
/* From now on, lines are kept for the log file (the mount is made). */
void ggfs_log_keep(void);
/* Before daemonizing (not with -f): where messages will go is said on
 * stderr, one line, when that is nowhere a user looks: no -o log_file and
 * no syslog socket (/dev/log missing, as in most containers): they go to
 * MOUNTPOINT/log then. */
void ggfs_log_say_where(void);
/* Called in the daemon once stderr is /dev/null: syslog unless log_file. */
void ggfs_log_daemonized(void);
/* The kept lines' size in bytes: the log file's st_size now. */
size_t ggfs_log_size(void);
/* A copy of the kept lines (malloc'd, *len bytes; not NUL-terminated), or
 * NULL when out of memory.  An empty log is a valid zero-length copy. */
char *ggfs_log_copy(size_t *len);
/* Says what is still suppressed, closes the file and syslog, frees the
 * kept lines. */
void ggfs_log_close(void);

#endif
