/* SPDX-License-Identifier: Apache-2.0 */
/* GPU product names. A topology's own name is shortened to its product part
 * ("GV100GL [Tesla V100 SXM2 16GB]" -> "Tesla V100 SXM2 16GB"); where the
 * topology has none (NCCL XML, hwloc without PCI names), pci.ids is asked
 * through topo_pci_ids_lookup (pciids.c), which only libddptopo links: the
 * SPANK plugin's copy of this code has none, so slurmstepd never links
 * libpci nor reads the database, and its GPUs keep their PCI ids. */
#include "config.h"
#include "internal.h"

#include <stdio.h>
#include <string.h>

void topo_gpu_name(char *dst, size_t size, const char *name)
{
    size_t len = strlen(name);
    const char *bracket = len > 2 && name[len - 1] == ']' ? strrchr(name, '[') : NULL;
    char product[256];

    /* "CHIP [Product]": the product part, when there is one */
    if (bracket && bracket > name && bracket[1] != ']' &&
        (size_t)snprintf(product, sizeof(product), "%.*s", (int)(name + len - 2 - bracket),
                         bracket + 1) < sizeof(product))
        name = product;
    topo_copy_elided(dst, size, name);
}

static const char *vendor_short(unsigned vendor)
{
    switch (vendor) {
    case 0x10de: return "NVIDIA ";
    case 0x1002: return "AMD ";
    case 0x8086: return "Intel ";
    default: return "";
    }
}

int topo_gpu_name_ids(char *dst, size_t size, unsigned vendor, unsigned device)
{
    char name[256];

    if (vendor && device && topo_pci_ids_lookup &&
        topo_pci_ids_lookup(name, sizeof(name), vendor, device)) {
        topo_gpu_name(dst, size, name);
        return 1;
    }
    snprintf(dst, size, "%s[%04x:%04x]", vendor_short(vendor), vendor, device);
    return 0;
}
