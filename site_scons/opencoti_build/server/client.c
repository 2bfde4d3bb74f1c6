/* opencoti-client: `python3 -m opencoti_build build ARGS` (client.py) in C, so a null request costs what the
 * server's answer costs and not a Python interpreter's start. `serve` compiles it next to the socket
 * (native_client.py); the protocol and the socket's name are protocol.py's, and
 * tests/integration/test_server.py holds the two clients' requests byte for byte equal.
 *
 * It handles the request a client sends in the common case only: anything else (no server for this
 * configuration, the server's "fallback", a command line or environment that is not UTF-8, which only
 * Python's surrogate escapes can carry) runs `PYTHON -m SCons ARGS` in its place, as client.py does with no
 * server: the answer is always a build's. PYTHON is the interpreter the server runs on, fixed at compile time.
 *
 * It checks what boundary.py checks before it sends anything (the request carries the environment and the
 * terminal): the socket's directory is this user's and open to no one else, the socket is this user's, and the
 * process listening on it (SO_PEERCRED) runs as this user. Otherwise it exits with status 2 and boundary.py's
 * line (Unsafe.for_client), running no build in its place; a server's refusal ("refused") is one line too.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#ifndef OPENCOTI_PYTHON
#error "define OPENCOTI_PYTHON: the interpreter that runs scons when no server answers"
#endif

extern char **environ;

enum { RETRIES = 100, KEY_HEX = 16 };
static const uint32_t MAX_MESSAGE = 16u << 20;
static const char *const PER_REQUEST[] = {"FILE", "TRACE", "VERBOSE"}; /* protocol.PER_REQUEST */
static const char DEFAULT_BUILD_DIR[] = "build", SERVER_DIR[] = "server";

static int nargs;
static char **args;
static volatile sig_atomic_t interrupted;

/* --- growing byte buffers ------------------------------------------------------------------------------ */

struct buf {
    char *p;
    size_t n, cap;
};

static void put(struct buf *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 256;
        b->p = realloc(b->p, b->cap);
        if (!b->p) {
            perror("opencoti-client");
            exit(2);
        }
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void puts_(struct buf *b, const char *s) { put(b, s, strlen(s)); }

/* --- SHA-256 (FIPS 180-4), for the configuration's key ------------------------------------------------- */

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t ror(uint32_t x, int n) { return x >> n | x << (32 - n); }

static void sha256_block(uint32_t h[8], const unsigned char *p) {
    uint32_t w[64], v[8];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++)
        w[i] = w[i - 16] + (ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ w[i - 15] >> 3) + w[i - 7] +
               (ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ w[i - 2] >> 10);
    memcpy(v, h, sizeof v);
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = v[7] + (ror(v[4], 6) ^ ror(v[4], 11) ^ ror(v[4], 25)) + ((v[4] & v[5]) ^ (~v[4] & v[6])) + K[i] + w[i];
        uint32_t t2 = (ror(v[0], 2) ^ ror(v[0], 13) ^ ror(v[0], 22)) + ((v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]));
        memmove(v + 1, v, 7 * sizeof *v);
        v[4] += t1;
        v[0] = t1 + t2;
    }
    for (int i = 0; i < 8; i++) h[i] += v[i];
}

static void sha256_hex(const char *data, size_t n, char out[65]) {
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    unsigned char tail[128] = {0};
    size_t full = n / 64 * 64, rest = n - full, len = rest < 56 ? 64 : 128;
    for (size_t i = 0; i < full; i += 64) sha256_block(h, (const unsigned char *)data + i);
    memcpy(tail, data + full, rest);
    tail[rest] = 0x80;
    for (int i = 0; i < 8; i++) tail[len - 1 - i] = (unsigned char)((uint64_t)n * 8 >> (8 * i));
    for (size_t i = 0; i < len; i += 64) sha256_block(h, tail + i);
    for (int i = 0; i < 8; i++) sprintf(out + 8 * i, "%08x", h[i]);
}

/* --- the request ---------------------------------------------------------------------------------------- */

static _Noreturn void plain_scons(void) {
    char **argv = calloc((size_t)nargs + 4, sizeof *argv);
    if (argv) {
        argv[0] = OPENCOTI_PYTHON;
        argv[1] = "-m";
        argv[2] = "SCons";
        memcpy(argv + 3, args, (size_t)nargs * sizeof *argv);
        execv(OPENCOTI_PYTHON, argv);
    }
    fprintf(stderr, "opencoti-client: cannot run %s: %s; run scons instead\n", OPENCOTI_PYTHON, strerror(errno));
    exit(127);
}

/* Strict UTF-8 (no overlong forms, no surrogates): what Python decodes to the same string from bytes. */
static int utf8(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int more = *p < 0x80 ? 0 : (*p & 0xe0) == 0xc0 ? 1 : (*p & 0xf0) == 0xe0 ? 2 : (*p & 0xf8) == 0xf0 ? 3 : -1;
        if (more < 0 || (more == 1 && *p < 0xc2)) return 0;
        uint32_t c = *p++ & (0x3f >> more);
        for (int i = 0; i < more; i++, p++) {
            if ((*p & 0xc0) != 0x80) return 0;
            c = c << 6 | (*p & 0x3f);
        }
        if ((more == 2 && (c < 0x800 || (c >= 0xd800 && c < 0xe000))) || (more == 3 && (c < 0x10000 || c > 0x10ffff)))
            return 0;
    }
    return 1;
}

static void json_string(struct buf *b, const char *s, size_t n) {
    put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            put(b, esc, 2);
        } else if (c < 0x20) {
            char esc[8];
            snprintf(esc, sizeof esc, "\\u%04x", c);
            puts_(b, esc);
        } else {
            put(b, s + i, 1);
        }
    }
    put(b, "\"", 1);
}

static int by_bytes(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* protocol.configuration: the KEY=VALUE arguments less PER_REQUEST's, sorted (UTF-8 sorts as code points). */
static int configuration(char **out) {
    int n = 0;
    for (int i = 0; i < nargs; i++) {
        const char *eq = strchr(args[i], '=');
        if (!eq || args[i][0] == '-') continue;
        int per_request = 0;
        for (size_t j = 0; j < sizeof PER_REQUEST / sizeof *PER_REQUEST; j++)
            per_request |= strlen(PER_REQUEST[j]) == (size_t)(eq - args[i]) && !strncmp(args[i], PER_REQUEST[j], (size_t)(eq - args[i]));
        if (!per_request) out[n++] = args[i];
    }
    qsort(out, (size_t)n, sizeof *out, by_bytes);
    return n;
}

/* boundary.Unsafe.for_client's line, then status 2: nothing is sent, no build runs. */
static _Noreturn void unsafe(const char *shown, const char *why, const char *removed) {
    fprintf(stderr, "opencoti-build: %s %s: the request (it carries your environment) was not sent; remove it (rm -rf %s) "
            "and serve again\n", shown, why, removed);
    exit(2);
}

/* boundary.check_private: owned by this user, no permission bit for group or others. */
static void check_private(const struct stat *st, const char *shown) {
    char why[128];
    if (st->st_uid != geteuid()) {
        snprintf(why, sizeof why, "is owned by uid %u (not you, uid %u)", (unsigned)st->st_uid, (unsigned)geteuid());
        unsafe(shown, why, shown);
    }
    if (st->st_mode & 077) {
        snprintf(why, sizeof why, "is open to group or others (mode %04o)", (unsigned)(st->st_mode & 07777));
        unsafe(shown, why, shown);
    }
}

/* A connected socket to the server for this configuration (protocol.server_dir, socket_name), or -1 when there is
 * none; exits through unsafe() when the directory, the socket or the listener is not this user's alone. */
static int connect_server(void) {
    char **variables = calloc((size_t)nargs + 1, sizeof *variables);
    if (!variables) return -1;
    int n = configuration(variables);
    struct buf joined = {0};
    const char *build_dir = DEFAULT_BUILD_DIR;
    for (int i = 0; i < n; i++) {
        if (i) put(&joined, "", 1);
        puts_(&joined, variables[i]);
        if (!strncmp(variables[i], "BUILD_DIR=", 10)) build_dir = variables[i] + 10;
    }
    char key[65], directory[PATH_MAX];
    sha256_hex(joined.p ? joined.p : "", joined.n, key);
    key[KEY_HEX] = 0;
    size_t length = strlen(build_dir); /* os.path.join(BUILD_DIR, "server"), as protocol.shown_server_dir */
    int written = !length ? snprintf(directory, sizeof directory, "%s", SERVER_DIR)
                          : snprintf(directory, sizeof directory, "%s%s%s", build_dir,
                                     build_dir[length - 1] == '/' ? "" : "/", SERVER_DIR);
    free(joined.p);
    free(variables);
    if (written < 0 || (size_t)written >= sizeof directory) return -1;
    struct stat st;
    int dir_fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) {
        if (errno == EACCES && stat(directory, &st) == 0) check_private(&st, directory); /* say whose it is */
        return -1; /* no server */
    }
    if (fstat(dir_fd, &st) != 0) {
        close(dir_fd);
        return -1;
    }
    check_private(&st, directory);
    char name[KEY_HEX + 6], shown_socket[PATH_MAX + sizeof name];
    snprintf(name, sizeof name, "%.*s.sock", KEY_HEX, key);
    snprintf(shown_socket, sizeof shown_socket, "%s/%s", directory, name);
    if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        close(dir_fd);
        return -1; /* no socket: no server */
    }
    if (st.st_uid != geteuid()) { /* boundary.socket_there */
        char why[128];
        snprintf(why, sizeof why, "is owned by uid %u (not you, uid %u)", (unsigned)st.st_uid, (unsigned)geteuid());
        unsafe(shown_socket, why, shown_socket);
    }
    if (!S_ISSOCK(st.st_mode)) {
        close(dir_fd);
        return -1;
    }
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    snprintf(address.sun_path, sizeof address.sun_path, "/proc/self/fd/%d/%s", dir_fd, name);
    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sock >= 0 && connect(sock, (struct sockaddr *)&address, sizeof address) != 0) {
        close(sock); /* nobody listening on it (a killed server's) */
        sock = -1;
    }
    close(dir_fd);
    struct ucred peer = {.pid = 0, .uid = (uid_t)-1};
    socklen_t peer_size = sizeof peer;
    if (sock >= 0 && (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &peer, &peer_size) != 0 || peer.uid != geteuid())) {
        char why[128];
        snprintf(why, sizeof why, "is served by uid %u (pid %d; not you, uid %u)", (unsigned)peer.uid, (int)peer.pid,
                 (unsigned)geteuid());
        unsafe(shown_socket, why, directory);
    }
    return sock;
}

/* {"op": "build", "argv": [...], "cwd": "...", "env": {...}}, length-prefixed; 0 when something is not UTF-8. */
static int build_request(struct buf *b) {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd) || !utf8(cwd)) return 0;
    put(b, "\0\0\0\0", 4);
    puts_(b, "{\"op\": \"build\", \"argv\": [");
    for (int i = 0; i < nargs; i++) {
        if (!utf8(args[i])) return 0;
        if (i) puts_(b, ", ");
        json_string(b, args[i], strlen(args[i]));
    }
    puts_(b, "], \"cwd\": ");
    json_string(b, cwd, strlen(cwd));
    puts_(b, ", \"env\": {");
    int first = 1;
    for (char **e = environ; *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq) continue; /* os.environ leaves such entries out, and keeps the first of a repeated name */
        size_t key_len = (size_t)(eq - *e);
        int repeated = 0;
        for (char **f = environ; f < e && !repeated; f++)
            repeated = !strncmp(*f, *e, key_len + 1);
        if (repeated) continue;
        if (!utf8(*e)) return 0;
        if (!first) puts_(b, ", ");
        first = 0;
        json_string(b, *e, key_len);
        puts_(b, ": ");
        json_string(b, eq + 1, strlen(eq + 1));
    }
    puts_(b, "}}");
    uint32_t length = (uint32_t)(b->n - 4);
    for (int i = 0; i < 4; i++) b->p[i] = (char)(length >> (24 - 8 * i));
    return 1;
}

static int send_all(int sock, const char *data, size_t n, int with_fds) {
    while (n) {
        ssize_t sent;
        if (with_fds) { /* stdin, stdout and stderr go with the first bytes (SCM_RIGHTS) */
            int fds[3] = {0, 1, 2};
            char control[CMSG_SPACE(sizeof fds)] = {0};
            struct iovec iov = {.iov_base = (void *)data, .iov_len = n};
            struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control};
            struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
            cmsg->cmsg_level = SOL_SOCKET;
            cmsg->cmsg_type = SCM_RIGHTS;
            cmsg->cmsg_len = CMSG_LEN(sizeof fds);
            memcpy(CMSG_DATA(cmsg), fds, sizeof fds);
            sent = sendmsg(sock, &msg, MSG_NOSIGNAL);
        } else {
            sent = send(sock, data, n, MSG_NOSIGNAL);
        }
        if (sent < 0) {
            if (errno == EINTR) continue;
            return 0;
        }
        with_fds = 0;
        data += sent;
        n -= (size_t)sent;
    }
    return 1;
}

/* Waits until sock is readable; a Ctrl-C meanwhile goes to the run's process group as {"signal": 2}. SIGINT is
 * blocked while the client talks to the server (main) and let through only inside ppoll, atomically: a Ctrl-C
 * that comes at any other moment stays pending until then, so it always ends the wait (a flag tested before a
 * blocking recv could be set just after the test, and the recv would wait for the whole build).
 * 1: readable; 0: the server could not be told of the Ctrl-C. */
static int wait_readable(int sock) {
    sigset_t open_mask;
    sigemptyset(&open_mask);
    struct pollfd readable = {.fd = sock, .events = POLLIN};
    for (;;) {
        if (ppoll(&readable, 1, NULL, &open_mask) > 0) return 1;
        if (errno != EINTR) return 0;
        if (interrupted) {
            interrupted = 0;
            static const char message[] = "\0\0\0\015{\"signal\": 2}";
            if (!send_all(sock, message, sizeof message - 1, 0)) return 0;
        }
    }
}

/* Reads exactly n bytes, passing a Ctrl-C on meanwhile (wait_readable).
 * 1: read; 0: the server closed the connection or could not be told of the Ctrl-C. */
static int receive_exactly(int sock, char *p, size_t n) {
    while (n) {
        if (!wait_readable(sock)) return 0;
        ssize_t got = recv(sock, p, n, 0);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return 0;
        p += got;
        n -= (size_t)got;
    }
    return 1;
}

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

/* The answer's first key ("status", "fallback", "retry" or "refused"), the status's value and a string's. */
static int answer(int sock, char *key, size_t key_size, long *status, char *text, size_t text_size) {
    unsigned char head[4];
    if (!receive_exactly(sock, (char *)head, 4)) return 0;
    uint32_t length = (uint32_t)head[0] << 24 | (uint32_t)head[1] << 16 | (uint32_t)head[2] << 8 | head[3];
    if (length > MAX_MESSAGE) return 0;
    char *body = malloc((size_t)length + 1);
    if (!body || !receive_exactly(sock, body, length)) return 0;
    body[length] = 0;
    const char *open_quote = strchr(body, '"'), *close_quote = open_quote ? strchr(open_quote + 1, '"') : NULL;
    if (!close_quote || (size_t)(close_quote - open_quote) > key_size) return 0;
    snprintf(key, key_size, "%.*s", (int)(close_quote - open_quote - 1), open_quote + 1);
    const char *value = close_quote + 1 + strspn(close_quote + 1, " :");
    *status = strtol(value, NULL, 10);
    size_t n = 0; /* a string value, as JSON escapes it (the server's refusal has no escapes) */
    if (*value == '"')
        for (value++; *value && *value != '"' && n + 1 < text_size; value++) {
            if (*value == '\\' && value[1]) value++;
            text[n++] = *value;
        }
    text[n] = 0;
    free(body);
    return 1;
}

int main(int argc, char **argv) {
    nargs = argc - 1;
    args = argv + 1;
    struct buf request = {0};
    if (!build_request(&request)) plain_scons();
    struct sigaction action = {.sa_handler = on_sigint}; /* no SA_RESTART: a Ctrl-C interrupts the wait */
    sigemptyset(&action.sa_mask);
    sigset_t sigint, unblocked;
    sigemptyset(&sigint);
    sigaddset(&sigint, SIGINT);
    for (int attempt = 0; attempt < RETRIES; attempt++) {
        int sock = connect_server();
        if (sock < 0) plain_scons();
        char key[16], text[512];
        long status = 0;
        sigaction(SIGINT, &action, NULL);
        sigprocmask(SIG_BLOCK, &sigint, &unblocked); /* let through in wait_readable only */
        /* a server that closed without reading the request (a refusal) may have said why first */
        int answered = (send_all(sock, request.p, request.n, 1) || errno == EPIPE || errno == ECONNRESET) &&
                       answer(sock, key, sizeof key, &status, text, sizeof text);
        sigprocmask(SIG_SETMASK, &unblocked, NULL); /* a Ctrl-C still pending reaches on_sigint, not the default */
        signal(SIGINT, SIG_DFL);
        interrupted = 0;
        close(sock);
        if (!answered) {
            fputs("opencoti-build: the build server went away during the build; run the build again\n", stderr);
            return 2;
        }
        if (!strcmp(key, "status")) return (int)status;
        if (!strcmp(key, "refused")) {
            fprintf(stderr, "opencoti-build: %s\n", text);
            return 2;
        }
        if (!strcmp(key, "fallback")) plain_scons();
        nanosleep(&(struct timespec){.tv_nsec = 20 * 1000 * 1000}, NULL); /* "retry": it restarts for new code */
    }
    plain_scons();
}
