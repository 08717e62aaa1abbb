/* core/mount.c — a mount's locks and lists made and destroyed (mount.h). */
#include "core/mount.h"

#include <string.h>

void core_mount_init(struct mount *fs)
{
    memset(fs, 0, sizeof *fs);
    fs->mnt_id = -1;
    fs->timeout = 365.0 * 86400;
    fs->lock_fd = -1;
    fs->in_fd = -1;
    fs->in_dir_wd = -1;
    /* Readers must not starve a commit waiting to swap the state in. */
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&fs->lock, &ra);
    pthread_rwlockattr_destroy(&ra);
    pthread_mutex_init(&fs->commit_mu, NULL);
    pthread_mutex_init(&fs->states_mu, NULL);
    pthread_mutex_init(&fs->sig_mu, NULL);
    pthread_mutex_init(&fs->pend_mu, NULL);
    glist_init(&fs->states);
    glist_init(&fs->live);
    glist_init(&fs->snaps);
    glist_init(&fs->st_opens);
    glist_init(&fs->streams);
}

void core_mount_fini(struct mount *fs)
{
    pthread_rwlock_destroy(&fs->lock);
    pthread_mutex_destroy(&fs->commit_mu);
    pthread_mutex_destroy(&fs->states_mu);
    pthread_mutex_destroy(&fs->sig_mu);
    pthread_mutex_destroy(&fs->pend_mu);
}
