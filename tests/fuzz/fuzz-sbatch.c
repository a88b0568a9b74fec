/* SPDX-License-Identifier: Apache-2.0 */
/* Job scripts for `ddp-topo report --sbatch`, read by libddptopo's
 * dt_script_parse directly. Only memory can run out, and what it reads must
 * hold together: the original kept byte for byte, every option named and
 * within the script's storage, on a line of the script, #SBATCH ones before
 * the first command and srun's on the first srun line, the commands in
 * order on lines of their own. */
#include "ddptopo.h"
#include "fuzz.h"

#include <string.h>

static long count_lines(const uint8_t *data, size_t size)
{
    long n = 0;

    for (size_t i = 0; i < size; i++)
        n += data[i] == '\n';
    return n + (size && data[size - 1] != '\n');
}

static int inside(const dt_script_t *sc, const char *p)
{
    return p >= sc->_words && p <= sc->_words + sc->len;
}

static void check_opts(const dt_script_t *sc, long nlines)
{
    long body = sc->ncmds ? sc->cmds[0].line : nlines + 1;

    for (unsigned i = 0; i < sc->nopts; i++) {
        const dt_script_opt_t *o = &sc->opts[i];
        if (!inside(sc, o->name) || !o->name[0] || (o->value && !inside(sc, o->value)))
            fuzz_fail("option %u: an empty name, or one outside the script", i);
        if (o->line < 1 || o->line > nlines)
            fuzz_fail("option --%.40s: line %ld of a %ld-line script", o->name, o->line, nlines);
        if (o->src == DT_SCRIPT_SBATCH && (o->line >= body || (i && o[-1].src != o->src)))
            fuzz_fail("#SBATCH --%.40s (line %ld) read after the first command (line %ld) or "
                      "after srun's options", o->name, o->line, body);
        if (o->src == DT_SCRIPT_SRUN && o->line != sc->srun_line)
            fuzz_fail("srun --%.40s on line %ld, the first srun line is %ld", o->name, o->line,
                      sc->srun_line);
    }
}

static void check_cmds(const dt_script_t *sc, long nlines)
{
    int srun_seen = !sc->nsrun;

    for (unsigned i = 0; i < sc->ncmds; i++) {
        const dt_script_cmd_t *c = &sc->cmds[i];
        if (c->line < 1 || c->last < c->line || c->last > nlines ||
            (i && c->line <= c[-1].last))
            fuzz_fail("command %u: lines %ld-%ld of %ld, after %ld", i, c->line, c->last, nlines,
                      i ? c[-1].last : 0);
        if (!c->text[0] || c->text[0] == '#')
            fuzz_fail("command %u (line %ld) is blank or a comment", i, c->line);
        srun_seen |= c->line == sc->srun_line;
    }
    if (!srun_seen || sc->nsrun > sc->ncmds || (!sc->nsrun) != (!sc->srun_line))
        fuzz_fail("%u srun lines, the first on line %ld, among %u commands", sc->nsrun,
                  sc->srun_line, sc->ncmds);
    if (sc->last_directive > (sc->ncmds ? sc->cmds[0].line - 1 : nlines) || sc->last_directive < 0)
        fuzz_fail("last directive on line %ld", sc->last_directive);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dt_script_t sc;
    dt_error_t err = {.code = DT_OK};
    long nlines = count_lines(data, size);

    if (dt_script_parse(&sc, (const char *)data, size, &err) < 0) {
        if (!err.text[0] || err.code != DT_E_NOMEM)
            fuzz_fail("dt_script_parse failed without running out of memory: '%s'", err.text);
        dt_script_free(&sc);
        return 0;
    }
    if (sc.len != size || (size && memcmp(sc.original, data, size)) || sc.original[size])
        fuzz_fail("the original is not the input");
    check_opts(&sc, nlines);
    check_cmds(&sc, nlines);
    dt_script_free(&sc);
    return 0;
}
