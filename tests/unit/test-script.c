/* SPDX-License-Identifier: Apache-2.0 */
/* dt_script_parse: a job script's #SBATCH and first srun line's options,
 * as sbatch and srun read them, with their line numbers; the body's
 * commands, continuation lines joined; hostile input read whole. */
#include "ddptopo.h"
#include "tap.h"

#include <stdlib.h>
#include <unistd.h>

/* The options as "LINE:name=value" words (srun's "LINE:srun:..."), for
 * comparing whole lists at once. */
static const char *opts_of(const dt_script_t *sc)
{
    static char buf[4096];
    size_t o = 0;

    buf[0] = '\0';
    for (unsigned i = 0; i < sc->nopts && o < sizeof(buf); i++) {
        const dt_script_opt_t *p = &sc->opts[i];
        o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%s%ld:%s%s%s%s", i ? " " : "",
                              p->line, p->src == DT_SCRIPT_SRUN ? "srun:" : "", p->name,
                              p->value ? "=" : "", p->value ? p->value : "");
    }
    return buf;
}

static const char *cmds_of(const dt_script_t *sc)
{
    static char buf[4096];
    size_t o = 0;

    buf[0] = '\0';
    for (unsigned i = 0; i < sc->ncmds && o < sizeof(buf); i++)
        o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%s%ld-%ld:%s", i ? " | " : "",
                              sc->cmds[i].line, sc->cmds[i].last, sc->cmds[i].text);
    return buf;
}

/* Parse a C string; the caller frees. */
static void parse(dt_script_t *sc, const char *text)
{
    dt_error_t err = {.code = DT_OK};

    if (dt_script_parse(sc, text, strlen(text), &err) < 0)
        printf("# dt_script_parse: %s\n", err.text);
}

static void expect_opts(const char *text, const char *want, const char *what)
{
    dt_script_t sc;

    parse(&sc, text);
    is_str(opts_of(&sc), want, "%s", what);
    dt_script_free(&sc);
}

static void test_sbatch_lines(void)
{
    dt_script_t sc;

    parse(&sc, "#!/bin/bash\n#SBATCH --nodes=2\n# a comment\n\n#SBATCH -N 3 --ntasks-per-node 8\n"
               "#SBATCH -c4\nsrun --gpus-per-node=8 python train.py --nodes 9\n");
    is_str(opts_of(&sc), "2:nodes=2 5:N=3 5:ntasks-per-node=8 6:c=4 7:srun:gpus-per-node=8",
           "#SBATCH --opt=v, -N v, --opt v, -cV; srun's options up to its program, by line");
    ok(sc.last_directive == 6 && sc.srun_line == 7 && sc.nsrun == 1,
       "the last directive is line 6 (%ld), srun is line 7 (%ld), one srun (%u)",
       sc.last_directive, sc.srun_line, sc.nsrun);
    is_str(cmds_of(&sc), "7-7:srun --gpus-per-node=8 python train.py --nodes 9",
           "comments and blank lines before the first command are no commands");
    dt_script_free(&sc);

    parse(&sc, "#!/bin/sh\necho hi\n#SBATCH --nodes=5\n  # indented comment\n");
    ok(sc.nopts == 0 && sc.last_directive == 1, "an #SBATCH line after the first command is "
       "ignored, as sbatch does (%u options; last directive %ld, the #! line)", sc.nopts,
       sc.last_directive);
    is_str(cmds_of(&sc), "2-2:echo hi", "... and is no command either, nor a comment");
    dt_script_free(&sc);

    expect_opts("#SBATCH -N 2 # two nodes --ntasks=4\n", "1:N=2", "'#' starts a comment");
    expect_opts("#SBATCH --exclusive 5 --time 10 --nodes --ntasks=2 -- 7 - --hold\n",
                "1:exclusive 1:time=10 1:nodes 1:ntasks=2 1:hold",
                "sbatch's flags take no next word, other options do unless it is an option; "
                "'--' and '-' are none");
    expect_opts("#SBATCH --job-name=a \\\n#SBATCH -N 2\n", "1:job-name=a 2:N=2",
                "#SBATCH lines are never continued");
    expect_opts("#SBATCH\t--nodes=1\r\n#SBATCH -n\r\n", "1:nodes=1 2:n",
                "tabs and CRLF line ends; a last option without a value has none");
}

static void test_quoting(void)
{
    expect_opts("#SBATCH --job-name=\"my job\" --comment='a b' --output=x\\ y -J \"\"\n",
                "1:job-name=my job 1:comment=a b 1:output=x y 1:J=",
                "quotes group and are removed, a backslash keeps the next character");
    expect_opts("#SBATCH --comment='say \"hi\"' --wckey=\"it's\"\n",
                "1:comment=say \"hi\" 1:wckey=it's", "one kind of quote inside the other");
    expect_opts("srun -n $(nproc --all) -c `nproc` --gres=gpu:$N prog\n",
                "1:srun:n=$(nproc --all) 1:srun:c=`nproc` 1:srun:gres=gpu:$N",
                "$(...) and `...` stay whole, as written (their values are the shell's)");
    expect_opts("#SBATCH --comment=\"unterminated -N 2\n#SBATCH -n 3\n",
                "1:comment=unterminated -N 2 2:n=3", "an open quote ends with its line");
}

static void test_srun(void)
{
    expect_opts("srun --nice prog -N 5\n", "1:srun:nice",
                "srun: an option not known to take a value is a flag; its program ends srun's options");
    expect_opts("srun -w node1 --container-image img --ddp-topo-bind gpu prog\n",
                "1:srun:w=node1 1:srun:container-image=img 1:srun:ddp-topo-bind=gpu",
                "srun's, pyxis's and ddp-topo's options taking a value take the next word");
    expect_opts("srun -- -N 2\n", "", "'--' ends srun's options");
    expect_opts("srun - -N 2\n", "", "a lone '-' is srun's program");
    expect_opts("  exec srun -N 2 p\n", "1:srun:N=2", "exec srun, indented");
    expect_opts("OMP_NUM_THREADS=4 _X=1 srun -N 3 p\n", "1:srun:N=3", "VAR=value srun");
    expect_opts("srunner -N 2\necho srun -N 3\nmpirun -np 4 srun\n", "",
                "srun only as the command's word, not within one");
    ok(dt_srun_takes_value("nodes") && dt_srun_takes_value("N") &&
       dt_srun_takes_value("container-image") && !dt_srun_takes_value("nice") &&
       !dt_srun_takes_value("exclusive") && !dt_srun_takes_value(""),
       "dt_srun_takes_value: nodes, N, container-image do; nice, exclusive, '' do not");
}

static void test_continuation(void)
{
    const char *text = "#SBATCH -N 1\nsrun -N 2 \\\n  --gpus 4 \\\r\n  python x.py\n"
                       "srun -n 1 y\nsrun -n 9 \\";
    dt_script_t sc;

    parse(&sc, text);
    is_str(opts_of(&sc), "1:N=1 2:srun:N=2 2:srun:gpus=4",
           "a continued srun command: every option on its first line's number");
    is_str(cmds_of(&sc), "2-4:srun -N 2     --gpus 4      python x.py | 5-5:srun -n 1 y | "
           "6-6:srun -n 9 \\", "commands joined over \\ and \\ CRLF, blanks for the joins; "
           "a backslash on the last line joins nothing");
    ok(sc.nsrun == 3 && sc.srun_line == 2, "three srun lines (%u), the first on line 2 (%ld)",
       sc.nsrun, sc.srun_line);
    ok(strlen(sc.cmds[0].text) == (size_t)(strstr(text, "x.py") + 4 - strstr(text, "srun")),
       "the joined command is as long as its lines: offsets into it are the original's");
    dt_script_free(&sc);

    parse(&sc, "echo a \\\n");
    is_str(cmds_of(&sc), "1-1:echo a \\", "a final backslash-newline: no line 2 is made up");
    dt_script_free(&sc);
}

/* Hostile input: read whole, never cut, never past its end. */
static void test_hostile(void)
{
    size_t big = 1u << 20;
    char *text = malloc(big + 64), *p;
    dt_script_t sc;
    dt_error_t err;
    static const char nul[] = "#SBATCH -N 2\0 --ntasks=9\n#SBATCH -n 3\nsrun -c 1\0 -N 7\nsrun";

    if (!text)
        return;
    p = text + sprintf(text, "#SBATCH --comment=");
    memset(p, 'x', big);
    strcpy(p + big, " -N 4\n");
    parse(&sc, text);
    ok(sc.nopts == 2 && strlen(sc.opts[0].value) == big && !strcmp(sc.opts[1].name, "N"),
       "a 1 MiB line is read whole: its value and the option after it");
    dt_script_free(&sc);

    for (p = text; p < text + 300000; p += 3)
        memcpy(p, "#\n\n", 3);
    strcpy(p, "#SBATCH -N 5\nsrun -n 2 p");
    parse(&sc, text);
    is_str(opts_of(&sc), "200001:N=5 200002:srun:n=2",
           "line numbers past 200,000; a last line without a newline is read");
    dt_script_free(&sc);

    ok(dt_script_parse(&sc, nul, sizeof(nul) - 1, &err) == 0 && sc.len == sizeof(nul) - 1 &&
       !memcmp(sc.original, nul, sizeof(nul) - 1), "NUL bytes: the original is kept byte for byte");
    is_str(opts_of(&sc), "1:N=2 2:n=3 3:srun:c=1", "... and a NUL ends its line's text only");
    ok(sc.nsrun == 2, "... the srun on the last line, without a newline, counted (%u)", sc.nsrun);
    dt_script_free(&sc);

    ok(dt_script_parse(&sc, "", 0, &err) == 0 && sc.nopts == 0 && sc.ncmds == 0 &&
       sc.last_directive == 0 && sc.original && !sc.original[0], "an empty script: nothing read");
    dt_script_free(&sc);
    free(text);
}

static void test_load(void)
{
    char dir[] = "/tmp/ddp-test-script.XXXXXX", path[64];
    dt_script_t sc;
    dt_error_t err = {.code = DT_OK};
    FILE *f;

    if (!mkdtemp(dir))
        return;
    snprintf(path, sizeof(path), "%s/job.sbatch", dir);
    ok(dt_script_load(&sc, path, &err) < 0 && err.code == DT_E_FILE &&
       !strncmp(err.text, "job script '", 12) && strstr(err.text, path),
       "a missing script: the error names it: %s", err.text);
    dt_script_free(&sc);
    ok(dt_script_load(&sc, dir, &err) < 0 && strstr(err.text, "not a regular file"),
       "a directory is refused: %s", err.text);
    dt_script_free(&sc);
    if ((f = fopen(path, "w"))) {
        fputs("#SBATCH -N 2\n", f);
        fclose(f);
    }
    ok(dt_script_load(&sc, path, &err) == 0 && sc.nopts == 1 && sc.opts[0].line == 1,
       "a script file is read");
    dt_script_free(&sc);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    test_sbatch_lines();
    test_quoting();
    test_srun();
    test_continuation();
    test_hostile();
    test_load();
    return tap_done();
}
