/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fsync-fail.c — an LD_PRELOAD shim for cbd-authority-test: fsync and
 * fdatasync fail with EIO, as on a failing disk, so that the test can
 * check that a write whose data never reached the disk leaves the
 * previous state file in place.
 */
#include <errno.h>

int fsync(int fd);
int fdatasync(int fd);

int
fsync(int fd)
{
	(void)fd;
	errno = EIO;
	return -1;
}

int
fdatasync(int fd)
{
	(void)fd;
	errno = EIO;
	return -1;
}
