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
 */
#ifndef FS_LOG_H
#define FS_LOG_H

#include <stdbool.h>

#define LOG_BURST 20

/* Installs the handler; opens log_file (may be NULL).  false after a
 * one-line error on stderr (log_file cannot be opened). */
bool ggfs_log_open(const char *mountpoint, const char *log_file);
/* Called in the daemon once stderr is /dev/null: syslog unless log_file. */
void ggfs_log_daemonized(void);
/* Says what is still suppressed, closes the file and syslog. */
void ggfs_log_close(void);

#endif
