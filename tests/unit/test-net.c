/* SPDX-License-Identifier: Apache-2.0 */
/* The runtime's TCP connect against a port nobody listens on, when the
 * kernel would make the connection to itself: in a network namespace of
 * its own whose ephemeral range is that one port, every connect to it
 * self-connects. A rank must neither take that for rank 0 nor leave the
 * port held (auth.test once saw rank 0 unable to bind MASTER_PORT for 30 s
 * after the ranks had retried against it). Root only (unshare). */
#define _GNU_SOURCE /* unshare */
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"
#include "tap.h"

#define PORT 40001

/* A namespace with loopback up and PORT as the only ephemeral port. */
static const char *isolate(void)
{
    struct ifreq ifr = {.ifr_name = "lo"};
    int fd;
    FILE *f;

    if (geteuid() != 0 || unshare(CLONE_NEWNET) < 0)
        return "needs root for a network namespace";
    fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0 || ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
        return "no loopback in the namespace";
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
        return "cannot bring loopback up";
    close(fd);
    if (!(f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "w")) ||
        fprintf(f, "%d %d\n", PORT, PORT) < 0 || fclose(f) != 0)
        return "cannot set the namespace's ephemeral port range";
    return NULL;
}

/* What the kernel does there: a plain connect to PORT reaches itself. */
static int kernel_self_connects(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(PORT),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)}, me;
    socklen_t len = sizeof(me);
    int fd = socket(AF_INET, SOCK_STREAM, 0), self;
    struct linger reset = {1, 0};

    self = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
           getsockname(fd, (struct sockaddr *)&me, &len) == 0 && me.sin_port == a.sin_port;
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
    close(fd);
    return self;
}

int main(void)
{
    const char *why = isolate();
    drt_error_t err = {""};
    int fd, port = 0;

    if (why) {
        printf("1..0 # SKIP %s\n", why);
        return 0;
    }
    ok(kernel_self_connects(), "the kernel connects 127.0.0.1:%d to itself here", PORT);
    fd = net_connect("127.0.0.1", PORT, rt_now() + 0.3, &err);
    ok(fd < 0, "net_connect does not take its own connection for a listener (got fd %d)", fd);
    ok(strstr(err.text, "no answer from 127.0.0.1:40001") != NULL, "... and says nobody answered: %s",
       err.text);
    fd = net_listen(PORT, &port, &err);
    ok(fd >= 0 && port == PORT, "... and leaves the port free for rank 0 to listen on: %s",
       fd >= 0 ? "listening" : err.text);
    if (fd >= 0)
        close(fd);
    return tap_done();
}
