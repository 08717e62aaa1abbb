/*
 * fs/devio.c — /dev/fuse reads that say ENODEV for ECONNABORTED (devio.h
 * says why).
 */
#include "devio.h"

#define FUSE_USE_VERSION 312     /* as fs.h */
#include <fuse_lowlevel.h>

#include <errno.h>
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#if FUSE_MAJOR_VERSION > 3 || (FUSE_MAJOR_VERSION == 3 && FUSE_MINOR_VERSION >= 13)

static ssize_t as_unmount(ssize_t r)
{
    if (r < 0 && errno == ECONNABORTED)
        errno = ENODEV;
    return r;
}

static ssize_t dev_read(int fd, void *buf, size_t len, void *userdata)
{
    (void)userdata;
    return as_unmount(read(fd, buf, len));
}

static ssize_t dev_splice_receive(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
                                  unsigned int flags, void *userdata)
{
    (void)userdata;
    return as_unmount(splice(fdin, offin, fdout, offout, len, flags));
}

static ssize_t dev_writev(int fd, struct iovec *iov, int count, void *userdata)
{
    (void)userdata;
    return writev(fd, iov, count);
}

static ssize_t dev_splice_send(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
                               unsigned int flags, void *userdata)
{
    (void)userdata;
    return splice(fdin, offin, fdout, offout, len, flags);
}

bool devio_attach(struct fuse_session *se)
{
    /* designated: libfuse 3.17 added a member (clone_fd), left NULL here
     * so that it clones /dev/fuse as before */
    static const struct fuse_custom_io io = {
        .writev = dev_writev,
        .read = dev_read,
        .splice_receive = dev_splice_receive,
        .splice_send = dev_splice_send,
    };
    return fuse_session_custom_io(se, &io, fuse_session_fd(se)) == 0;
}

#else

bool devio_attach(struct fuse_session *se)
{
    (void)se;
    return false;
}

#endif
