/* SPDX-License-Identifier: Apache-2.0 */
/* GPU names from the maintained pci.ids database through libpci: linked
 * into libddptopo only (Makefile.am), never into the SPANK plugin.
 *
 * libpci is used for names only: pci_alloc() reads no device (pci_init(),
 * which picks a bus access method, is never called), DNS and the
 * ~/.pciids-cache are switched off (id_lookup_mode 0), and so is udev's hwdb
 * (PCI_LOOKUP_NO_HWDB), so names come from the one file checked below. */
#include "config.h"
#include "internal.h"

#ifdef HAVE_LIBPCI
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pci/pci.h>

/* today's pci.ids is 1.4 MB; a bigger file is not the database */
#define PCI_IDS_MAX (32L << 20)

static pthread_mutex_t ids_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pci_access *ids; /* loaded at the first lookup, kept for the process */
static int ids_state;          /* 0 not tried yet, 1 usable, -1 not usable */
static jmp_buf ids_fail;       /* under ids_lock */
static int ids_fd = -1;        /* the database, until libpci has read it */

/* libpci's error hook must not return (its default exits the process):
 * a malformed file or a failed allocation ends the lookup instead. */
__attribute__((noreturn)) static void ids_error(char *msg, ...)
{
    (void)msg;
    longjmp(ids_fail, 1);
}

static void ids_quiet(char *msg, ...)
{
    (void)msg;
}

/* A plain regular file of sane size: never a FIFO or device that would
 * block or never end, never compressed data (libpci's zlib would inflate
 * it without bound). The checked descriptor stays open and libpci reads the
 * file through it (/proc/self/fd/N), so it cannot be swapped in between. */
static int ids_file_open(const char *path)
{
    unsigned char magic[2] = {0, 0};
    struct stat st;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);

    if (fd < 0)
        return -1;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size > PCI_IDS_MAX ||
        pread(fd, magic, 2, 0) < 0 || (magic[0] == 0x1f && magic[1] == 0x8b)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* DDP_TOPO_PCI_IDS names another database; else libpci's own, whose
 * ".gz" name (Debian's) falls back to the plain file next to it. */
static int ids_open(void)
{
    const char *path = getenv("DDP_TOPO_PCI_IDS");
    char name[PATH_MAX], *fdname;

    ids = pci_alloc(); /* exits the process itself when out of memory */
    ids->error = ids_error;
    ids->warning = ids_quiet;
    ids->debug = ids_quiet;
    ids->id_lookup_mode = 0;
    if (!path || !*path)
        path = ids->id_file_name;
    snprintf(name, sizeof(name), "%s", path);
    if (path == ids->id_file_name && strlen(name) > 3 && !strcmp(name + strlen(name) - 3, ".gz"))
        name[strlen(name) - 3] = '\0';
    if ((ids_fd = ids_file_open(name)) < 0)
        return -1;
    snprintf(name, sizeof(name), "/proc/self/fd/%d", ids_fd);
    if (!(fdname = strdup(name)))
        return -1;
    pci_set_name_list_path(ids, fdname, 1);
    return 1;
}

int topo_pci_ids_lookup(char *buf, size_t size, unsigned vendor, unsigned device)
{
    const char *volatile name = NULL;

    pthread_mutex_lock(&ids_lock);
    if (!ids_state)
        ids_state = ids_open();
    if (ids_state > 0) {
        if (!setjmp(ids_fail))
            name = pci_lookup_name(ids, buf, (int)size,
                                   PCI_LOOKUP_DEVICE | PCI_LOOKUP_NO_NUMBERS | PCI_LOOKUP_NO_HWDB,
                                   (int)vendor, (int)device);
        else
            ids_state = -1; /* libpci's state after its error is unknown: not used again */
    }
    if (ids_fd >= 0) { /* read at the first lookup, or never usable */
        close(ids_fd);
        ids_fd = -1;
    }
    pthread_mutex_unlock(&ids_lock);
    return name != NULL;
}
#endif
