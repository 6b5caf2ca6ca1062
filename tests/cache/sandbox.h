/*
** sandbox.h -- real write failures for the store's tests, for any user: a
** child process enters a private mount namespace (root: its own; anyone
** else: a user namespace that maps them to root) and mounts a tiny tmpfs
** (disk full: ENOSPC) or a read-only bind (EROFS) over a test directory.
** Permission bits cannot stand in for these, since tests may run as root.
** Only ever call these in a forked child: the namespace is the child's.
*/
#ifndef TC_TEST_SANDBOX_H
#define TC_TEST_SANDBOX_H

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#define SANDBOX_SKIP 77   /* a child's exit status: namespaces unavailable */

static inline int sandbox_write(const char *path, const char *text)
{
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  ssize_t n = write(fd, text, strlen(text));
  close(fd);
  return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* Enter a private mount namespace. 0, or -1 when the system allows none. */
static inline int sandbox_enter(void)
{
  uid_t uid = geteuid();
  gid_t gid = getegid();
  if (unshare(CLONE_NEWNS) != 0) {
    char map[64];
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
      return -1;
    snprintf(map, sizeof map, "0 %u 1\n", (unsigned)uid);
    if (sandbox_write("/proc/self/uid_map", map) < 0)
      return -1;
    sandbox_write("/proc/self/setgroups", "deny");
    snprintf(map, sizeof map, "0 %u 1\n", (unsigned)gid);
    if (sandbox_write("/proc/self/gid_map", map) < 0)
      return -1;
  }
  return mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
}

/* A fresh tmpfs of `kb` KiB (and at most `inodes` files, 0: no limit)
** over dir. */
static inline int sandbox_tmpfs(const char *dir, int kb, int inodes)
{
  char opts[64];
  if (inodes > 0)
    snprintf(opts, sizeof opts, "size=%dk,nr_inodes=%d,mode=0700", kb,
             inodes);
  else
    snprintf(opts, sizeof opts, "size=%dk,mode=0700", kb);
  return mount("tc-test", dir, "tmpfs", 0, opts);
}

/* Fill the file system holding dir until it is full. */
static inline int sandbox_fill(const char *dir)
{
  char path[4200], buf[4096];
  snprintf(path, sizeof path, "%s/ballast", dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return -1;
  memset(buf, 'x', sizeof buf);
  while (write(fd, buf, sizeof buf) > 0) {}
  int full = errno == ENOSPC;
  /* Fill the last partial page too, a byte at a time. */
  while (write(fd, buf, 1) > 0) {}
  close(fd);
  return full ? 0 : -1;
}

/* Make dir (and everything under it) read-only for this namespace. */
static inline int sandbox_readonly(const char *dir)
{
  if (mount(dir, dir, NULL, MS_BIND | MS_REC, NULL) != 0)
    return -1;
  return mount(NULL, dir, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL);
}

#endif
