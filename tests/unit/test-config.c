/* SPDX-License-Identifier: Apache-2.0 */
/* The plugin's parsing of --ddp-topo values and plugstack.conf arguments. */
#include "plugin.h"
#include "ddptopo.h"
#include "tap.h"

#include <stdlib.h>
#include <unistd.h>

static void request_ok(const char *value, ddp_mode_t mode, bool verbose)
{
    ddp_request_t r;
    char err[DDP_ERRLEN] = "";

    ok(ddp_request_parse(value, &r, err, sizeof(err)) == 0 && r.given && r.mode == mode &&
       r.verbose == verbose && !r.share, "--ddp-topo=%s is %s%s %s", value ? value : "(bare)",
       ddp_mode_name(mode), verbose ? ",verbose" : "", err);
}

static void request_refused(const char *value, const char *why)
{
    ddp_request_t r;
    char err[DDP_ERRLEN] = "";

    ok(ddp_request_parse(value, &r, err, sizeof(err)) < 0 && strstr(err, why) &&
       strstr(err, "auto, env, off"), "--ddp-topo=%s refused: %s", value, err);
}

static void config_refused(const char *arg, const char *why)
{
    ddp_config_t c;
    char err[DDP_ERRLEN] = "";
    char *av[] = {(char *)"check=/opt/ddp-check", (char *)arg};

    ok(ddp_config_parse(2, av, &c, err, sizeof(err)) < 0 && strstr(err, why) &&
       strstr(err, arg), "plugstack '%s' refused: %s", arg, err);
}

/* The warning reads the kernel's range from a real file, as from /proc. */
static void port_range_warning(void)
{
    char path[] = "/tmp/ddp-topo-test-config.XXXXXX", msg[DDP_ERRLEN] = "";
    ddp_config_t c = {.port_lo = 61000, .port_hi = 65535};
    int fd = mkstemp(path);

    ok(fd >= 0 && write(fd, "32768\t60999\n", 12) == 12, "a range file like the kernel's");
    ok(!ddp_port_range_warning(&c, path, msg, sizeof(msg)), "61000-65535 is above 32768-60999");
    c.port_lo = 20000;
    c.port_hi = 32768;
    ok(ddp_port_range_warning(&c, path, msg, sizeof(msg)) &&
       strstr(msg, "port_range=20000-32768 overlaps the kernel's ephemeral port range "
              "32768-60999") && strstr(msg, path), "20000-32768 overlaps it by one port: %s", msg);
    c.port_lo = 60999;
    c.port_hi = 61000;
    ok(ddp_port_range_warning(&c, path, msg, sizeof(msg)), "60999-61000 overlaps it too");
    ok(!ddp_port_range_warning(&c, "/nonexistent/ip_local_port_range", msg, sizeof(msg)),
       "no warning when the range cannot be read");
    if (fd >= 0) {
        close(fd);
        unlink(path);
    }
}

int main(void)
{
    ddp_config_t c;
    char err[DDP_ERRLEN];
    char *av[] = {(char *)"default=auto", (char *)"port_range=20000-20010"};

    request_ok(NULL, DDP_MODE_AUTO, false);
    request_ok("", DDP_MODE_AUTO, false);
    request_ok("auto", DDP_MODE_AUTO, false);
    request_ok("env", DDP_MODE_ENV, false);
    request_ok("off", DDP_MODE_OFF, false);
    request_ok("auto,verbose", DDP_MODE_AUTO, true);
    request_ok("verbose,env", DDP_MODE_ENV, true);
    request_ok("verbose", DDP_MODE_AUTO, true);
    {
        ddp_request_t r;
        ok(ddp_request_parse("auto,share", &r, err, sizeof(err)) == 0 && r.share &&
           r.mode == DDP_MODE_AUTO, "--ddp-topo=auto,share allows sharing");
    }
    request_refused("bogus", "unknown item 'bogus'");
    request_refused("-n1", "unknown item '-n1'");
    request_refused("auto,", "empty item");
    request_refused("auto,off", "a second mode 'off'");
    request_refused("AUTO", "unknown item");

    ok(ddp_config_parse(0, NULL, &c, err, sizeof(err)) == 0 && c.default_mode == DDP_MODE_OFF &&
       c.port_lo == 61000 && c.port_hi == 65535, "no arguments: default=off, 61000-65535");
    ok(ddp_config_parse(2, av, &c, err, sizeof(err)) == 0 && c.default_mode == DDP_MODE_AUTO &&
       c.port_lo == 20000 && c.port_hi == 20010, "default=auto port_range=20000-20010");
    config_refused("default=bogus", "unknown mode");
    config_refused("port_range=5-1", "port range");
    config_refused("colour=blue", "unknown argument (valid: default=");
    config_refused("topology=relative/%n.xml", "absolute path pattern");
    config_refused("topology=/x/%q.xml", "unknown '%q'");
    config_refused("bind=gpu,disk", "unknown item 'disk'");
    {
        char *av2[] = {(char *)"topology=/etc/ddp-topo/%n.xml", (char *)"bind=none"};
        ok(ddp_config_parse(2, av2, &c, err, sizeof(err)) == 0 &&
           !strcmp(c.topology, "/etc/ddp-topo/%n.xml") && c.bind == 0,
           "topology=/etc/ddp-topo/%%n.xml bind=none");
        ok(ddp_config_parse(0, NULL, &c, err, sizeof(err)) == 0 && !strcmp(c.topology, "live") &&
           c.bind == (DT_BIND_GPU | DT_BIND_CPU), "defaults: topology=live bind=gpu,cpu");
    }
    {
        /* a bad argument must not hide default=, which says which jobs asked */
        char *av3[] = {(char *)"colour=blue", (char *)"default=auto", (char *)"bind=disk"};
        ok(ddp_config_parse(3, av3, &c, err, sizeof(err)) < 0 && strstr(err, "'colour=blue'") &&
           !strstr(err, "disk") && c.default_mode == DDP_MODE_AUTO,
           "colour=blue default=auto bind=disk: the first error, and default=auto still read: %s",
           err);
    }
    {
        char arg[1100] = "topology=/";
        memset(arg + 10, '%', 1020); /* "%%" expands to one character: a short path */
        arg[1030] = '\0';
        ok(ddp_config_parse(1, (char *[]){arg}, &c, err, sizeof(err)) < 0 &&
           strstr(err, "longer than 511 characters"),
           "a 1020-character topology pattern is refused, never cut: %.60s...", err);
    }
    {
        /* a second value is an error naming both, never last-wins; the first stays */
        char *av4[] = {(char *)"default=off", (char *)"bind=none", (char *)"default=env"};
        ok(ddp_config_parse(3, av4, &c, err, sizeof(err)) < 0 &&
           strstr(err, "arguments 'default=off' and 'default=env': the same setting twice") &&
           c.default_mode == DDP_MODE_OFF, "default=off bind=none default=env refused: %s", err);
        config_refused("check=/x", "'check=/opt/ddp-check' and 'check=/x'");
    }
    {
        char *av5[] = {(char *)"default=env", (char *)"disable"};
        ok(ddp_config_parse(2, av5, &c, err, sizeof(err)) == 0 && c.disabled &&
           c.default_mode == DDP_MODE_ENV, "disable: the soft-off is read");
        ok(ddp_config_parse(0, NULL, &c, err, sizeof(err)) == 0 && !c.disabled,
           "not disabled by default");
        config_refused("disable=yes", "unknown argument");
        config_refused("colour=blue", ", disable)");
    }
    port_range_warning();
    {
        unsigned b;
        ok(ddp_bind_option_parse("cpu,mem", &b, err, sizeof(err)) == 0 &&
           b == (DT_BIND_CPU | DT_BIND_MEM), "--ddp-topo-bind=cpu,mem");
        ok(ddp_bind_option_parse("", &b, err, sizeof(err)) < 0 &&
           strstr(err, "invalid --ddp-topo-bind value"), "--ddp-topo-bind= (empty) refused: %s", err);
    }
    return tap_done();
}
