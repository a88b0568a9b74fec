/* SPDX-License-Identifier: Apache-2.0 */
/* The XML reading both file formats share: hwloc-node.c checks an hwloc
 * export's bitmaps with it before hwloc reads the file, nccl-node.c reads
 * NCCL XML with it. It calls nothing of theirs. */
#include "internal.h"

#include <libxml/parser.h>

static void xml_silent(void *ctx, const char *msg, ...)
{
    (void)ctx;
    (void)msg;
}

/* Our parses: no network, no messages on stderr (errors come back through
 * xmlGetLastError), and libxml2's generic error handler left as libxml2's
 * own afterwards (close_topology in hwloc-node.c says why that matters). */
xmlDoc *topo_xml_read(const char *buf, size_t len)
{
    xmlDoc *doc;

    xmlSetGenericErrorFunc(NULL, xml_silent);
    doc = xmlReadMemory(buf, (int)len, NULL, NULL,
                        XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
    xmlSetGenericErrorFunc(NULL, NULL);
    return doc;
}
