/* SPDX-License-Identifier: Apache-2.0 */
/* Loading a topology file: read it once, tell its format from what precedes
 * the root element, and hand the contents to that format's loader
 * (hwloc-node.c or nccl-node.c). Only this file calls the loaders; nothing
 * below it calls back up. */
#include "ddptopo.h"
#include "internal.h"

#include <stdio.h>
#include <string.h>

/* What precedes the root element: the XML declaration, comments,
 * processing instructions and at most one document type declaration. */
typedef struct {
    const char *root;   /* the root element's name */
    char *doctype;      /* "<!DOCTYPE ...>", NULL when none */
    size_t doctype_len;
    int subset;         /* the DOCTYPE has an internal subset: "[...]" */
} prolog_t;

/* End of "<!DOCTYPE name SYSTEM 'uri'>", quotes respected; stops at an
 * internal subset's '['. */
static char *doctype_end(char *s, int *subset)
{
    char quote = 0;

    for (s += 9; *s; s++) {
        if (quote)
            quote = *s == quote ? 0 : quote;
        else if (*s == '"' || *s == '\'')
            quote = *s;
        else if (*s == '[')
            return *subset = 1, s;
        else if (*s == '>')
            return s + 1;
    }
    return NULL;
}

static int scan_prolog(char *s, prolog_t *p)
{
    memset(p, 0, sizeof(*p));
    if (!strncmp(s, "\xef\xbb\xbf", 3)) /* UTF-8 byte order mark */
        s += 3;
    for (;;) {
        s += strspn(s, " \t\r\n");
        if (!strncmp(s, "<?", 2))
            s = (s = strstr(s, "?>")) ? s + 2 : NULL;
        else if (!strncmp(s, "<!--", 4))
            s = (s = strstr(s + 4, "-->")) ? s + 3 : NULL;
        else if (!strncmp(s, "<!DOCTYPE", 9) && !p->doctype) {
            p->doctype = s;
            s = doctype_end(s, &p->subset);
            if (p->subset)
                return 0;
            p->doctype_len = s ? (size_t)(s - p->doctype) : 0;
        } else if (*s == '<' && s[1] != '!') {
            p->root = s + 1;
            return 0;
        } else
            return -1;
        if (!s)
            return -1;
    }
}

static int is_root(const char *root, const char *name)
{
    size_t n = strlen(name);

    return !strncmp(root, name, n) && strchr(" \t\r\n/>", root[n]) && root[n];
}

/* Entities and DTDs belong in neither format. hwloc 2.9's libxml reader
 * dereferences a DOCTYPE's missing system id (SIGSEGV, in slurmstepd too)
 * and libxml expands entities in attributes in quadratic time, so an
 * internal subset is refused outright, a DOCTYPE in NCCL XML (NCCL writes
 * none) as well, and hwloc's own external one ("hwloc2.dtd") is blanked,
 * so that no reader ever sees a DTD. Blanking keeps line numbers. */
static int check_doctype(const char *path, prolog_t *p, int nccl, dt_error_t *err)
{
    if (!p->doctype)
        return 0;
    if (p->subset || nccl) {
        topo_seterr(err, "topology file '%.300s': %s (write the file without a <!DOCTYPE ...> "
                    "line, e.g. export it again with 'ddp-topo detect -o FILE')", path,
                    p->subset ? "a document type declaration with an internal subset "
                    "('<!DOCTYPE ... [') is refused: topology files need no DTD or entities"
                    : "NCCL XML with a document type declaration is refused: NCCL writes none");
        return -1;
    }
    for (size_t i = 0; i < p->doctype_len; i++)
        if (p->doctype[i] != '\n')
            p->doctype[i] = ' ';
    return 0;
}

static int load_buffer(dt_node_t *node, const char *path, char *buf, size_t len, dt_error_t *err)
{
    prolog_t p;
    int nccl;

    if (scan_prolog(buf, &p) == 0 && p.subset)
        return check_doctype(path, &p, 0, err);
    if (!p.root || (!is_root(p.root, "topology") && !is_root(p.root, "system"))) {
        topo_seterr_code(err, DT_E_FORMAT, "topology file '%.300s': neither hwloc XML "
                         "(<topology>) nor NCCL XML (<system>)", path);
        return -1;
    }
    nccl = is_root(p.root, "system");
    if (check_doctype(path, &p, nccl, err) < 0)
        return -1;
    return nccl ? topo_load_nccl_xml(node, path, buf, len, err)
                : topo_load_hwloc_xml(node, path, buf, len, err);
}

int dt_node_load_file(dt_node_t *node, const char *path, dt_error_t *err)
{
    char *buf, why[sizeof(err->text)];
    size_t len;
    int rc;

    memset(node, 0, sizeof(*node));
    if (strlen(path) >= sizeof(node->path)) {
        topo_seterr(err, "topology file '%.100s...': path longer than %zu characters (use a "
                    "shorter one)", path, sizeof(node->path) - 1);
        return -1;
    }
    if (dt_read_file(path, DT_INPUT_MAX, &buf, &len, err) < 0) {
        snprintf(why, sizeof(why), "%s", err ? err->text : "");
        topo_seterr_code(err, DT_E_FILE, "topology file %s", why);
        return -1;
    }
    rc = load_buffer(node, path, buf, len, err);
    free(buf);
    /* whatever is wrong inside a topology file is the file's */
    if (rc < 0 && err && err->code == DT_E_INPUT)
        err->code = DT_E_FORMAT;
    return rc;
}

