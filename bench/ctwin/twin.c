/*
 * The C twin of bench/bench_test.go: the same UCX calls with the same
 * parameters, timed the same way (a loop of N operations). Prints one line
 * per benchmark: "name ns/op". Usage: twin N [name...]
 * The two-process benchmarks run this program again as their peer:
 * twin --peer TLS (see twoproc_test.go for the protocol), and the
 * pipelined 64 MiB transfers (share_test.go's raw rows) as
 * twin --region-peer TLS.
 */
#define _GNU_SOURCE /* sched_setaffinity */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <ucp/api/ucp.h>
#include <uct/api/uct.h>

#define CHECK(_expr) do { ucs_status_t _s = (_expr); if (_s != UCS_OK) { \
        fprintf(stderr, "%s: %s\n", #_expr, ucs_status_string(_s)); exit(1); } } while (0)

typedef struct { int done; ucs_status_t status; } req_t;

static ucp_context_h ctx;
static long iters;
static double loop_start, loop_end; /* each benchmark times its loop only */
#define WARMUP_ECHO 16 /* untimed round trips of the echo pairs */
#define START() (loop_start = now_ns())
#define END()   (loop_end = now_ns())

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void req_init(void *r) { memset(r, 0, sizeof(req_t)); }
static void send_cb(void *r, ucs_status_t st, void *u) { ((req_t *)r)->status = st; ((req_t *)r)->done = 1; }

static ucp_context_h new_context(const char *tls)
{
    ucp_config_t *config;
    ucp_params_t params;
    ucp_context_h c;

    CHECK(ucp_config_read(NULL, NULL, &config));
    CHECK(ucp_config_modify(config, "TLS", tls));
    memset(&params, 0, sizeof(params));
    params.field_mask        = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_REQUEST_SIZE |
                               UCP_PARAM_FIELD_REQUEST_INIT | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features          = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_AMO64 | UCP_FEATURE_TAG |
                               UCP_FEATURE_STREAM | UCP_FEATURE_WAKEUP;
    params.request_size      = sizeof(req_t);
    params.request_init      = req_init;
    params.mt_workers_shared = 1;
    CHECK(ucp_init(&params, config, &c));
    ucp_config_release(config);
    return c;
}

static ucp_mem_h map(void *addr, size_t len, int allocate)
{
    ucp_mem_map_params_t p;
    ucp_mem_h memh;

    memset(&p, 0, sizeof(p));
    p.field_mask  = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_FLAGS | UCP_MEM_MAP_PARAM_FIELD_PROT |
                    UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    p.address     = addr;
    p.length      = len;
    p.flags       = allocate ? UCP_MEM_MAP_ALLOCATE : 0;
    p.prot        = UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_LOCAL_WRITE |
                    UCP_MEM_MAP_PROT_REMOTE_READ | UCP_MEM_MAP_PROT_REMOTE_WRITE;
    p.memory_type = UCS_MEMORY_TYPE_HOST;
    CHECK(ucp_mem_map(ctx, &p, &memh));
    return memh;
}

static void *mem_addr(ucp_mem_h memh)
{
    ucp_mem_attr_t a = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS};
    CHECK(ucp_mem_query(memh, &a));
    return a.address;
}

static void bench_register(size_t n)
{
    void *buf = calloc(1, n);
    START();
    for (long i = 0; i < iters; ++i) {
        ucp_mem_unmap(ctx, map(buf, n, 0));
    }
    END();
    free(buf);
}

static void bench_register64k(void) { bench_register(64 << 10); }
static void bench_register4m(void)  { bench_register(4 << 20); }

static void bench_alloc64k(void)
{
    START();
    for (long i = 0; i < iters; ++i) {
        ucp_mem_unmap(ctx, map(NULL, 64 << 10, 1));
    }
    END();
}

static void bench_rkey_pack(void)
{
    ucp_mem_h m = map(NULL, 1 << 20, 1);
    void *buf;
    size_t n;
    START();
    for (long i = 0; i < iters; ++i) {
        CHECK(ucp_rkey_pack(ctx, m, &buf, &n));
        ucp_rkey_buffer_release(buf);
    }
    END();
    ucp_mem_unmap(ctx, m);
}

static void bench_export_attempt(void)
{
    ucp_mem_h m = map(NULL, 1 << 20, 1);
    ucp_memh_pack_params_t p = {.field_mask = UCP_MEMH_PACK_PARAM_FIELD_FLAGS,
                                .flags = UCP_MEMH_PACK_FLAG_EXPORT};
    ucp_memh_buffer_release_params_t r = {.field_mask = 0};
    void *buf;
    size_t n;
    START();
    for (long i = 0; i < iters; ++i) {
        if (ucp_memh_pack(m, &p, &buf, &n) == UCS_OK) {
            ucp_memh_buffer_release(buf, &r);
        }
    }
    END();
    ucp_mem_unmap(ctx, m);
}

static void bench_zero_export_import(void)
{
    ucp_mem_h m = map(NULL, 0, 1), imp;
    ucp_memh_pack_params_t p = {.field_mask = UCP_MEMH_PACK_PARAM_FIELD_FLAGS,
                                .flags = UCP_MEMH_PACK_FLAG_EXPORT};
    ucp_memh_buffer_release_params_t r = {.field_mask = 0};
    ucp_mem_map_params_t ip;
    void *buf;
    size_t n;
    START();
    for (long i = 0; i < iters; ++i) {
        CHECK(ucp_memh_pack(m, &p, &buf, &n));
        memset(&ip, 0, sizeof(ip));
        ip.field_mask           = UCP_MEM_MAP_PARAM_FIELD_EXPORTED_MEMH_BUFFER;
        ip.exported_memh_buffer = buf;
        CHECK(ucp_mem_map(ctx, &ip, &imp));
        ucp_memh_buffer_release(buf, &r);
        ucp_mem_unmap(ctx, imp);
    }
    END();
    ucp_mem_unmap(ctx, m);
}

static void bench_uct_register_pack(void)
{
    uct_component_h *comps;
    unsigned ncomps, i;
    uct_md_h md = NULL;
    uct_md_config_t *config;
    uct_mem_h memh;
    char rkey[256];
    void *buf = calloc(1, 64 << 10);

    CHECK(uct_query_components(&comps, &ncomps));
    for (i = 0; i < ncomps && md == NULL; ++i) {
        uct_component_attr_t a = {.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME};
        CHECK(uct_component_query(comps[i], &a));
        if (strcmp(a.name, "self") == 0) {
            CHECK(uct_md_config_read(comps[i], NULL, NULL, &config));
            CHECK(uct_md_open(comps[i], "self", config, &md));
            uct_config_release(config);
        }
    }
    START();
    for (long k = 0; k < iters; ++k) {
        CHECK(uct_md_mem_reg(md, buf, 64 << 10, UCT_MD_MEM_ACCESS_ALL, &memh));
        CHECK(uct_md_mkey_pack(md, memh, rkey));
        uct_md_mem_dereg(md, memh);
    }
    END();
    uct_md_close(md);
    uct_release_component_list(comps);
    free(buf);
}

/* A client worker and a server worker progressed by a thread as ucx-go's
 * Worker.Run does: at least 64 rounds and 50 us after the last progress
 * that did something, then it arms and sleeps on the event fd (50 ms at
 * most, as ucx-go's guard tick). */
static ucp_worker_h client, server;
static volatile int stop_server;

static void *server_loop(void *arg)
{
    int fd;
    struct pollfd pfd;
    CHECK(ucp_worker_get_efd(server, &fd));
    pfd.fd = fd;
    pfd.events = POLLIN;
    while (!stop_server) {
        int active = 0;
        double t0  = now_ns();
        for (int i = 0; i < 64 || now_ns() - t0 < 50e3; ++i) {
            if ((active = ucp_worker_progress(server) > 0)) {
                break;
            }
        }
        if (!active && ucp_worker_arm(server) == UCS_OK) {
            poll(&pfd, 1, 50);
        }
    }
    return NULL;
}

static void wait_req_on(ucp_worker_h w, void *r)
{
    if (r == NULL) {
        return;
    }
    if (UCS_PTR_IS_ERR(r)) {
        fprintf(stderr, "op: %s\n", ucs_status_string(UCS_PTR_STATUS(r)));
        exit(1);
    }
    while (!((req_t *)r)->done) {
        ucp_worker_progress(w);
    }
    ((req_t *)r)->done = 0;
    ucp_request_free(r);
}

static void wait_req(void *r) { wait_req_on(client, r); }

enum { OP_GET, OP_PUT, OP_RKEY_UNPACK, OP_FADD };

static void rma_bench(size_t n, int op, int flush)
{
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SERIALIZED};
    ucp_address_t *addr;
    size_t alen;
    ucp_ep_h ep;
    ucp_ep_params_t ep_params;
    ucp_rkey_h rkey;
    void *packed;
    size_t plen;
    pthread_t th;
    ucp_request_param_t rp;

    CHECK(ucp_worker_create(ctx, &wp, &client));
    CHECK(ucp_worker_create(ctx, &wp, &server));
    ucp_mem_h target = map(NULL, n, 1), local = map(NULL, n, 1);
    CHECK(ucp_worker_get_address(server, &addr, &alen));
    memset(&ep_params, 0, sizeof(ep_params));
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep_params.address    = addr;
    CHECK(ucp_ep_create(client, &ep_params, &ep));
    ucp_worker_release_address(server, addr);
    CHECK(ucp_rkey_pack(ctx, target, &packed, &plen));
    CHECK(ucp_ep_rkey_unpack(ep, packed, &rkey));
    stop_server = 0;
    pthread_create(&th, NULL, server_loop, NULL);

    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_MEMH;
    rp.cb.send      = send_cb;
    rp.memh         = local;
    uint64_t raddr  = (uint64_t)mem_addr(target);
    void *lbuf      = mem_addr(local);
    START();
    for (long i = 0; i < iters && op == OP_RKEY_UNPACK; ++i) {
        ucp_rkey_h k;
        CHECK(ucp_ep_rkey_unpack(ep, packed, &k));
        ucp_rkey_destroy(k);
    }
    uint64_t one = 1, old = 0;
    ucp_request_param_t ap = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_DATATYPE |
                                              UCP_OP_ATTR_FIELD_REPLY_BUFFER,
                              .cb.send = send_cb, .datatype = ucp_dt_make_contig(8), .reply_buffer = &old};
    for (long i = 0; i < iters && op == OP_FADD; ++i) {
        wait_req(ucp_atomic_op_nbx(ep, UCP_ATOMIC_OP_ADD, &one, 1, raddr, rkey, &ap));
    }
    for (long i = 0; i < iters && op != OP_RKEY_UNPACK && op != OP_FADD; ++i) {
        wait_req(op == OP_PUT ? ucp_put_nbx(ep, lbuf, n, raddr, rkey, &rp)
                     : ucp_get_nbx(ep, lbuf, n, raddr, rkey, &rp));
        if (flush) {
            ucp_request_param_t fp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK, .cb.send = send_cb};
            wait_req(ucp_ep_flush_nbx(ep, &fp));
        }
    }
    END();
    stop_server = 1;
    ucp_worker_signal(server);
    pthread_join(th, NULL);
    ucp_rkey_buffer_release(packed);
    ucp_rkey_destroy(rkey);
    ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE};
    void *cr = ucp_ep_close_nbx(ep, &cp);
    while (cr != NULL && !UCS_PTR_IS_ERR(cr) && ucp_request_check_status(cr) == UCS_INPROGRESS) {
        ucp_worker_progress(client);
    }
    if (cr != NULL && !UCS_PTR_IS_ERR(cr)) {
        ucp_request_free(cr);
    }
    ucp_mem_unmap(ctx, target);
    ucp_mem_unmap(ctx, local);
    ucp_worker_destroy(server);
    ucp_worker_destroy(client);
}

/* ---- Echo pairs: the server thread answers each message (tag ping-pong
 * of 8 bytes; 64 KiB on a stream, answered with 8 bytes). Both workers
 * busy-poll, as the Go benchmark's both do. */
static void recv_tag_cb(void *r, ucs_status_t st, const ucp_tag_recv_info_t *i, void *u)
{
    ((req_t *)r)->status = st;
    ((req_t *)r)->done   = 1;
}
static void recv_stream_cb(void *r, ucs_status_t st, size_t n, void *u)
{
    ((req_t *)r)->status = st;
    ((req_t *)r)->done   = 1;
}

static ucp_ep_h echo_ep; /* the server's endpoint to the client */
static int echo_stream;
static char echo_buf[64 << 10];

static void tag_recv_wait(ucp_worker_h w, void *buf, size_t n, ucp_tag_t tag)
{
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK, .cb.recv = recv_tag_cb};
    wait_req_on(w, ucp_tag_recv_nbx(w, buf, n, tag, ~(ucp_tag_t)0, &rp));
}

static void stream_recv_wait(ucp_worker_h w, ucp_ep_h ep, void *buf, size_t n)
{
    size_t got;
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_FLAGS,
                              .cb.recv_stream = recv_stream_cb, .flags = UCP_STREAM_RECV_FLAG_WAITALL};
    wait_req_on(w, ucp_stream_recv_nbx(ep, buf, n, &got, &rp));
}

static void *echo_loop(void *arg)
{
    ucp_request_param_t sp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK, .cb.send = send_cb};
    for (long i = 0; i < iters + WARMUP_ECHO; ++i) {
        if (echo_stream) {
            stream_recv_wait(server, echo_ep, echo_buf, sizeof(echo_buf));
            wait_req_on(server, ucp_stream_send_nbx(echo_ep, echo_buf, 8, &sp));
        } else {
            tag_recv_wait(server, echo_buf, 8, 1);
            wait_req_on(server, ucp_tag_send_nbx(echo_ep, echo_buf, 8, 2, &sp));
        }
    }
    return NULL;
}

static void echo_bench(int stream)
{
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SERIALIZED};
    ucp_ep_params_t ep_params;
    ucp_address_t *addr;
    size_t alen;
    ucp_ep_h ep;
    pthread_t th;
    static char out[64 << 10], in[8];
    ucp_request_param_t sp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK, .cb.send = send_cb};

    CHECK(ucp_worker_create(ctx, &wp, &client));
    CHECK(ucp_worker_create(ctx, &wp, &server));
    memset(&ep_params, 0, sizeof(ep_params));
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    CHECK(ucp_worker_get_address(server, &addr, &alen));
    ep_params.address = addr;
    CHECK(ucp_ep_create(client, &ep_params, &ep));
    ucp_worker_release_address(server, addr);
    CHECK(ucp_worker_get_address(client, &addr, &alen));
    ep_params.address = addr;
    CHECK(ucp_ep_create(server, &ep_params, &echo_ep));
    ucp_worker_release_address(client, addr);
    echo_stream = stream;
    pthread_create(&th, NULL, echo_loop, NULL);
    size_t n = stream ? sizeof(out) : 8;
    for (long i = 0; i < iters + WARMUP_ECHO; ++i) {
        if (i == WARMUP_ECHO) {
            START();
        }
        if (stream) {
            wait_req(ucp_stream_send_nbx(ep, out, n, &sp));
            stream_recv_wait(client, ep, in, 8);
        } else {
            wait_req(ucp_tag_send_nbx(ep, out, n, 1, &sp));
            tag_recv_wait(client, in, 8, 2);
        }
    }
    END();
    pthread_join(th, NULL);
    ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE};
    ucp_ep_h eps[2] = {ep, echo_ep};
    ucp_worker_h ws[2] = {client, server};
    for (int k = 0; k < 2; ++k) {
        void *cr = ucp_ep_close_nbx(eps[k], &cp);
        while (cr != NULL && !UCS_PTR_IS_ERR(cr) && ucp_request_check_status(cr) == UCS_INPROGRESS) {
            ucp_worker_progress(ws[k]);
        }
        if (cr != NULL && !UCS_PTR_IS_ERR(cr)) {
            ucp_request_free(cr);
        }
    }
    ucp_worker_destroy(server);
    ucp_worker_destroy(client);
}

static void bench_tag_ping_pong8(void) { echo_bench(0); }
static void bench_stream64k(void)      { echo_bench(1); }

static void bench_put8_flush(void)  { rma_bench(8, OP_PUT, 1); }
static void bench_get8(void)        { rma_bench(8, OP_GET, 0); }
static void bench_fetch_add8(void)  { rma_bench(8, OP_FADD, 0); }
static void bench_put64k(void)      { rma_bench(64 << 10, OP_PUT, 0); }
static void bench_put1m(void)       { rma_bench(1 << 20, OP_PUT, 0); }
static void bench_put4m(void)       { rma_bench(4 << 20, OP_PUT, 0); }
static void bench_get64k(void)      { rma_bench(64 << 10, OP_GET, 0); }
static void bench_get1m(void)       { rma_bench(1 << 20, OP_GET, 0); }
static void bench_get4m(void)       { rma_bench(4 << 20, OP_GET, 0); }
static void bench_rkey_unpack(void) { rma_bench(4096, OP_RKEY_UNPACK, 0); }

static void bench_progress_idle(void)
{
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SERIALIZED};
    ucp_worker_h w;
    CHECK(ucp_worker_create(ctx, &wp, &w));
    START();
    for (long i = 0; i < iters; ++i) {
        ucp_worker_progress(w);
    }
    END();
    ucp_worker_destroy(w);
}

/* ---- Two processes: the peer is this program run again (twin --peer TLS).
 * Protocol, as in twoproc_test.go: the peer prints "ADDR RKEY RADDR" (hex,
 * hex, decimal), reads the client's address (hex), prints "ready", and runs
 * until its stdin closes. It echoes every active message of AM_ID back on
 * its own endpoint and owns the memory the client puts to and gets from. */
#define AM_ID  1
#define WARMUP 16 /* untimed operations: wire-up completes before the loop */

static const char *tls_shm = "posix,sysv,self";
static const char *tls_tcp = "tcp";

static int am_received;      /* messages the handler took */
static char am_data[64];     /* the last one's data, copied as ucx-go does */
static size_t am_len;

static ucs_status_t am_cb(void *arg, const void *header, size_t header_length,
                          void *data, size_t length, const ucp_am_recv_param_t *param)
{
    am_len = length < sizeof(am_data) ? length : sizeof(am_data);
    memcpy(am_data, data, am_len);
    ++am_received;
    return UCS_OK;
}

static void set_am_handler(ucp_worker_h w)
{
    ucp_am_handler_param_t p = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                                              UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                                              UCP_AM_HANDLER_PARAM_FIELD_CB |
                                              UCP_AM_HANDLER_PARAM_FIELD_ARG,
                                .id = AM_ID, .flags = UCP_AM_FLAG_WHOLE_MSG,
                                .cb = am_cb, .arg = NULL};
    CHECK(ucp_worker_set_am_recv_handler(w, &p));
}

/* ucx-go's SendAMMem: no header, the data's memh, COPY_HEADER always. */
static void *am_send(ucp_ep_h ep, void *buf, size_t n, ucp_mem_h memh)
{
    ucp_request_param_t p;
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_MEMH;
    p.cb.send      = send_cb;
    p.flags        = UCP_AM_SEND_FLAG_COPY_HEADER;
    p.memh         = memh;
    return ucp_am_send_nbx(ep, AM_ID, NULL, 0, buf, n, &p);
}

static ucp_ep_h connect_to(ucp_worker_h w, const ucp_address_t *addr)
{
    ucp_ep_params_t p;
    ucp_ep_h ep;
    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    p.address    = addr;
    CHECK(ucp_ep_create(w, &p, &ep));
    return ep;
}

static void close_ep(ucp_worker_h w, ucp_ep_h ep)
{
    ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE};
    void *cr = ucp_ep_close_nbx(ep, &cp);
    while (cr != NULL && !UCS_PTR_IS_ERR(cr) && ucp_request_check_status(cr) == UCS_INPROGRESS) {
        ucp_worker_progress(w);
    }
    if (cr != NULL && !UCS_PTR_IS_ERR(cr)) {
        ucp_request_free(cr);
    }
}

static void put_hex(FILE *f, const void *p, size_t n)
{
    for (size_t i = 0; i < n; ++i) {
        fprintf(f, "%02x", ((const unsigned char *)p)[i]);
    }
}

/* Decodes the hex word at *s into a malloc'd buffer; advances *s. */
static void *get_hex(char **s, size_t *n)
{
    char *p = *s + strspn(*s, " \n");
    size_t len = strspn(p, "0123456789abcdef");
    unsigned char *b = malloc(len / 2 + 1);
    for (size_t i = 0; i + 1 < len; i += 2) {
        sscanf(p + i, "%2hhx", &b[i / 2]);
    }
    *n = len / 2;
    *s = p + len;
    return b;
}

static ucp_worker_h new_worker(void)
{
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SERIALIZED};
    ucp_worker_h w;
    CHECK(ucp_worker_create(ctx, &wp, &w));
    return w;
}

/* run.sh's BENCH_PEER_CPU: the peer and the threads it starts on that
 * core, as the Go peer under taskset. */
static void pin_peer(void)
{
    const char *cpu = getenv("BENCH_PEER_CPU");
    cpu_set_t set;

    if ((cpu == NULL) || (*cpu == '\0')) {
        return;
    }
    CPU_ZERO(&set);
    CPU_SET(atoi(cpu), &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) {
        perror("sched_setaffinity");
        exit(1);
    }
}

/* The loop of both peers (--peer and --region-peer) is ucx-go's
 * Worker.Run: progress, call handle(w, arg) for what arrived, and after at
 * least 64 idle rounds and 50 us arm and sleep on the event fd (bounded by
 * 50 ms, as ucx-go's guard tick). Returns when the client closes the
 * peer's stdin. */
static void peer_loop(ucp_worker_h w, void (*handle)(ucp_worker_h, void *), void *arg)
{
    int efd;

    CHECK(ucp_worker_get_efd(w, &efd));
    for (;;) {
        int active = 0;
        double t0 = now_ns();
        for (int i = 0; i < 64 || now_ns() - t0 < 50e3; ++i) {
            active = ucp_worker_progress(w) > 0;
            handle(w, arg);
            if (active) {
                break;
            }
        }
        if (active || ucp_worker_arm(w) != UCS_OK) {
            continue;
        }
        struct pollfd pfd[2] = {{.fd = efd, .events = POLLIN}, {.fd = 0, .events = POLLIN}};
        poll(pfd, 2, 50);
        if (pfd[1].revents) {
            char buf[256];
            if (read(0, buf, sizeof(buf)) <= 0) {
                return; /* the client is done */
            }
        }
    }
}

/* The --peer side: replies in flight and the messages echoed so far. */
typedef struct {
    ucp_ep_h ep;
    ucp_mem_h echo;
    void *echo_buf;
    void *pending[64];
    int npending, handled;
} echo_peer_t;

/* Frees the earlier replies that completed (tested, not waited for) and
 * echoes every message the handler took since the last call. */
static void echo_handle(ucp_worker_h w, void *arg)
{
    echo_peer_t *e = arg;

    for (int k = 0; k < e->npending; ++k) {
        if (((req_t *)e->pending[k])->done) {
            ((req_t *)e->pending[k])->done = 0;
            ucp_request_free(e->pending[k]);
            e->pending[k--] = e->pending[--e->npending];
        }
    }
    for (; e->handled < am_received; ++e->handled) {
        memcpy(e->echo_buf, am_data, am_len);
        void *r = am_send(e->ep, e->echo_buf, am_len, e->echo);
        if (UCS_PTR_IS_ERR(r)) {
            fprintf(stderr, "twin peer: echo: %s\n", ucs_status_string(UCS_PTR_STATUS(r)));
            exit(1);
        }
        if (r != NULL && e->npending < 64) {
            e->pending[e->npending++] = r;
        } else if (r != NULL) {
            wait_req_on(w, r);
        }
    }
}

static void peer_main(const char *tls)
{
    ucp_worker_h w;
    ucp_address_t *addr;
    size_t alen, plen, clen;
    void *packed, *caddr;
    char *line = NULL, *s;
    size_t cap = 0;
    echo_peer_t e = {0};

    pin_peer();

    ctx = new_context(tls);
    w   = new_worker();
    ucp_mem_h target = map(NULL, 4096, 1);
    e.echo     = map(NULL, 4096, 1);
    e.echo_buf = mem_addr(e.echo);
    set_am_handler(w);
    CHECK(ucp_rkey_pack(ctx, target, &packed, &plen));
    CHECK(ucp_worker_get_address(w, &addr, &alen));
    put_hex(stdout, addr, alen);
    putchar(' ');
    put_hex(stdout, packed, plen);
    printf(" %llu\n", (unsigned long long)(uintptr_t)mem_addr(target));
    fflush(stdout);
    ucp_worker_release_address(w, addr);
    ucp_rkey_buffer_release(packed);

    if (getline(&line, &cap, stdin) <= 0) {
        fprintf(stderr, "twin peer: no client address on stdin\n");
        exit(1);
    }
    s     = line;
    caddr = get_hex(&s, &clen);
    e.ep  = connect_to(w, caddr);
    printf("ready\n");
    fflush(stdout);

    peer_loop(w, echo_handle, &e);
    while (e.npending > 0) {
        wait_req_on(w, e.pending[--e.npending]);
    }
    close_ep(w, e.ep);
    free(caddr);
    free(line);
    ucp_mem_unmap(ctx, target);
    ucp_mem_unmap(ctx, e.echo);
    ucp_worker_destroy(w);
    ucp_cleanup(ctx);
}

/* The client side: a context of its own with the peer's transports. */
typedef struct {
    pid_t pid;
    FILE *to_peer, *from_peer;
    ucp_context_h saved_ctx;
    ucp_worker_h w;
    ucp_ep_h ep;
    ucp_rkey_h rkey;
    uint64_t raddr;
    ucp_mem_h local;
    void *lbuf;
} remote_t;

extern char **environ;

/* Runs this program again as "twin MODE TLS", its stdin and stdout piped
 * to *to_peer and *from_peer. posix_spawn, not fork: no copy of this
 * process's UCX state. */
static pid_t spawn_peer(const char *mode, const char *tls, FILE **to_peer, FILE **from_peer)
{
    int in[2], out[2];
    posix_spawn_file_actions_t fa;
    char *argv[] = {"twin", (char *)mode, (char *)tls, NULL};
    pid_t pid;

    if (pipe(in) || pipe(out)) {
        perror("pipe");
        exit(1);
    }
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, in[1]);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    if (posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ) != 0) {
        perror("posix_spawn");
        exit(1);
    }
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    *to_peer   = fdopen(in[1], "w");
    *from_peer = fdopen(out[0], "r");
    return pid;
}

/* Closes the peer's stdin (its cue to exit) and reaps it: killed if it has
 * not exited within 10 s. */
static void end_peer(pid_t pid, FILE *to_peer, FILE *from_peer)
{
    int status;
    fclose(to_peer);
    for (int i = 0; i < 1000 && waitpid(pid, &status, WNOHANG) == 0; ++i) {
        usleep(10000);
    }
    if (waitpid(pid, &status, WNOHANG) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    fclose(from_peer);
}

static void remote_open(remote_t *r, const char *tls)
{
    char *line = NULL, *s;
    size_t cap = 0, alen, plen;
    void *paddr, *prkey;
    ucp_address_t *addr;

    memset(r, 0, sizeof(*r));
    r->pid = spawn_peer("--peer", tls, &r->to_peer, &r->from_peer);
    if (getline(&line, &cap, r->from_peer) <= 0) {
        fprintf(stderr, "twin: the peer ended early\n");
        exit(1);
    }
    s     = line;
    paddr = get_hex(&s, &alen);
    prkey = get_hex(&s, &plen);
    r->raddr = strtoull(s, NULL, 10);

    r->saved_ctx = ctx;
    ctx          = new_context(tls);
    r->w         = new_worker();
    set_am_handler(r->w);
    r->local = map(NULL, 4096, 1);
    r->lbuf  = mem_addr(r->local);
    r->ep    = connect_to(r->w, paddr);
    CHECK(ucp_ep_rkey_unpack(r->ep, prkey, &r->rkey));
    CHECK(ucp_worker_get_address(r->w, &addr, &alen));
    put_hex(r->to_peer, addr, alen);
    fputc('\n', r->to_peer);
    fflush(r->to_peer);
    ucp_worker_release_address(r->w, addr);
    if (getline(&line, &cap, r->from_peer) <= 0 || strcmp(line, "ready\n") != 0) {
        fprintf(stderr, "twin: the peer is not ready\n");
        exit(1);
    }
    free(paddr);
    free(prkey);
    free(line);
    client = r->w; /* wait_req progresses it */
}

static void remote_close(remote_t *r)
{
    ucp_rkey_destroy(r->rkey);
    close_ep(r->w, r->ep);
    ucp_mem_unmap(ctx, r->local);
    ucp_worker_destroy(r->w);
    ucp_cleanup(ctx);
    ctx = r->saved_ctx;
    end_peer(r->pid, r->to_peer, r->from_peer);
}

static void ping_pong(remote_t *r)
{
    int want = am_received + 1;
    wait_req(am_send(r->ep, r->lbuf, 8, r->local));
    while (am_received < want) {
        ucp_worker_progress(r->w);
    }
}

static void put8_flush(remote_t *r)
{
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_MEMH,
                              .cb.send = send_cb, .memh = r->local};
    ucp_request_param_t fp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK, .cb.send = send_cb};
    wait_req(ucp_put_nbx(r->ep, r->lbuf, 8, r->raddr, r->rkey, &rp));
    wait_req(ucp_ep_flush_nbx(r->ep, &fp));
}

static void get8(remote_t *r)
{
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_MEMH,
                              .cb.send = send_cb, .memh = r->local};
    wait_req(ucp_get_nbx(r->ep, r->lbuf, 8, r->raddr, r->rkey, &rp));
}

static void bench_remote(const char *tls, void (*op)(remote_t *))
{
    remote_t r;
    remote_open(&r, tls);
    for (int i = 0; i < WARMUP; ++i) {
        op(&r);
    }
    START();
    for (long i = 0; i < iters; ++i) {
        op(&r);
    }
    END();
    remote_close(&r);
}

/* The counterpart of one empty cgo call: an empty call the compiler cannot
 * inline or drop. */
static void noop(void) {}
static void (*volatile noop_fn)(void) = noop;

static void bench_crossing(void)
{
    START();
    for (long i = 0; i < iters; ++i) {
        noop_fn();
    }
    END();
}

static void bench_am_ping_pong8_shm(void) { bench_remote(tls_shm, ping_pong); }
static void bench_am_ping_pong8_tcp(void) { bench_remote(tls_tcp, ping_pong); }
static void bench_put8_flush_shm(void)    { bench_remote(tls_shm, put8_flush); }
static void bench_put8_flush_tcp(void)    { bench_remote(tls_tcp, put8_flush); }
static void bench_get8_shm(void)          { bench_remote(tls_shm, get8); }
static void bench_get8_tcp(void)          { bench_remote(tls_tcp, get8); }

/* ---- Pipelined 64 MiB over tcp on loopback: the C side of share_test.go's
 * rows (ShareRead64M, ShareWrite64M), made as its raw rows make them. The
 * peer (twin --region-peer TLS, pinned by BENCH_PEER_CPU) registers 64 MiB
 * of its own memory, listens on BENCH_SHARE_ADDR (a ucp listener, endpoints
 * accepted with peer error handling), prints "PORT RKEY RADDR" (decimal,
 * hex, decimal) and progresses as the other peer does until its stdin
 * closes. The client connects to the listener (client-server, peer error
 * handling), waits for the wire-up with a flush before it unpacks the key
 * (as Endpoint.UnpackRegion does), and moves 64 MiB between its own
 * unregistered buffer and the peer's: gets or puts of BENCH_SHARE_CHUNK
 * bytes, BENCH_SHARE_DEPTH of them in flight, each waited for in the order
 * started by busy-polling (ucp_request_check_status, ucp_worker_progress);
 * puts are then flushed. One untimed transfer completes the wire-up first.
 * run.sh reads chunk and depth from package share (DefaultChunk,
 * DefaultDepth); the defaults here are theirs today, 512 KiB and 4. */
#define REGION_SIZE (64 << 20)

/* The IPv4 address the region peer listens on and the client connects to:
 * BENCH_SHARE_ADDR (run.sh sets the machine's network address, where the
 * Go rows' exporter listens), else 127.0.0.1. */
static struct in_addr region_addr(void)
{
    struct in_addr a;
    const char *v = getenv("BENCH_SHARE_ADDR");
    if (v == NULL || *v == '\0') {
        a.s_addr = htonl(INADDR_LOOPBACK);
    } else if (inet_pton(AF_INET, v, &a) != 1) {
        fprintf(stderr, "twin: BENCH_SHARE_ADDR=%s is not an IPv4 address\n", v);
        exit(1);
    }
    return a;
}
#define REGION_MAX_DEPTH 64 /* share's ring */
#define REGION_MAX_EPS 16

static ucp_listener_h region_listener;
static ucp_conn_request_h region_conns[REGION_MAX_EPS]; /* accepted by the peer's loop */
static int region_nconns;

static void region_conn_cb(ucp_conn_request_h request, void *arg)
{
    if (region_nconns < REGION_MAX_EPS) {
        region_conns[region_nconns++] = request;
    } else {
        ucp_listener_reject(region_listener, request);
    }
}

static void region_ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    *(ucs_status_t *)arg = status;
}

/* A 64 MiB buffer of its own, every page touched (as Go's make and fill). */
static unsigned char *region_buf(int mul)
{
    unsigned char *b = aligned_alloc(4096, REGION_SIZE);
    if (b == NULL) {
        perror("aligned_alloc");
        exit(1);
    }
    for (size_t i = 0; i < REGION_SIZE; ++i) {
        b[i] = (unsigned char)(i * mul);
    }
    return b;
}

/* The --region-peer side: an endpoint for each connection accepted. */
typedef struct {
    ucp_ep_h eps[REGION_MAX_EPS];
    ucs_status_t ep_err[REGION_MAX_EPS];
    int neps, taken;
} region_peer_t;

/* Creates an endpoint for each connection request queued since the last call. */
static void region_accept(ucp_worker_h w, void *arg)
{
    region_peer_t *rp = arg;

    for (; rp->taken < region_nconns; ++rp->taken) {
        ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
                                            UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                            UCP_EP_PARAM_FIELD_ERR_HANDLER,
                              .conn_request = region_conns[rp->taken],
                              .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                              .err_handler = {.cb = region_ep_err_cb, .arg = &rp->ep_err[rp->neps]}};
        rp->ep_err[rp->neps] = UCS_OK;
        CHECK(ucp_ep_create(w, &ep, &rp->eps[rp->neps]));
        ++rp->neps;
    }
}

static void region_peer_main(const char *tls)
{
    ucp_worker_h w;
    ucp_listener_params_t lp;
    ucp_listener_attr_t la;
    struct sockaddr_in sa;
    region_peer_t rp = {0};
    void *packed;
    size_t plen;

    pin_peer();
    ctx = new_context(tls);
    w   = new_worker();
    unsigned char *buf = region_buf(7);
    ucp_mem_h target = map(buf, REGION_SIZE, 0);
    CHECK(ucp_rkey_pack(ctx, target, &packed, &plen));

    memset(&sa, 0, sizeof(sa));
    sa.sin_family      = AF_INET;
    sa.sin_addr        = region_addr();
    memset(&lp, 0, sizeof(lp));
    lp.field_mask       = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr    = (const struct sockaddr *)&sa;
    lp.sockaddr.addrlen = sizeof(sa);
    lp.conn_handler.cb  = region_conn_cb;
    CHECK(ucp_listener_create(w, &lp, &region_listener));
    la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    CHECK(ucp_listener_query(region_listener, &la));
    printf("%u ", ntohs(((struct sockaddr_in *)&la.sockaddr)->sin_port));
    put_hex(stdout, packed, plen);
    printf(" %llu\n", (unsigned long long)(uintptr_t)buf);
    fflush(stdout);
    ucp_rkey_buffer_release(packed);

    peer_loop(w, region_accept, &rp);
    while (rp.neps > 0) {
        close_ep(w, rp.eps[--rp.neps]);
    }
    ucp_listener_destroy(region_listener);
    ucp_mem_unmap(ctx, target);
    ucp_worker_destroy(w);
    ucp_cleanup(ctx);
    free(buf);
}

/* The twin's wait for an operation of the transfer: progress until UCX
 * reports the request complete, then its outcome. */
static void region_wait(ucp_worker_h w, void *r, const char *what)
{
    ucs_status_t st = UCS_OK;
    if (UCS_PTR_IS_ERR(r)) {
        st = UCS_PTR_STATUS(r);
    } else if (r != NULL) {
        while ((st = ucp_request_check_status(r)) == UCS_INPROGRESS) {
            ucp_worker_progress(w);
        }
        ((req_t *)r)->done = 0; /* request memory is reused */
        ucp_request_free(r);
    }
    if (st != UCS_OK) {
        fprintf(stderr, "twin: %s: %s\n", what, ucs_status_string(st));
        exit(1);
    }
}

typedef struct {
    ucp_worker_h w;
    ucp_ep_h ep;
    ucp_rkey_h rkey;
    uint64_t raddr;
    unsigned char *buf;
    size_t chunk;
    int depth;
} region_t;

/* One transfer of the whole 64 MiB: share's pipeline in ucp calls. */
static void region_move(region_t *g, int write)
{
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK, .cb.send = send_cb};
    void *ring[REGION_MAX_DEPTH];
    size_t next = 0, head = 0, tail = 0;

    for (;;) {
        while (next < REGION_SIZE && tail - head < (size_t)g->depth) {
            size_t end = next + g->chunk < REGION_SIZE ? next + g->chunk : REGION_SIZE;
            void *r = write ? ucp_put_nbx(g->ep, g->buf + next, end - next, g->raddr + next, g->rkey, &rp)
                            : ucp_get_nbx(g->ep, g->buf + next, end - next, g->raddr + next, g->rkey, &rp);
            if (UCS_PTR_IS_ERR(r)) {
                region_wait(g->w, r, write ? "put" : "get");
            }
            ring[tail++ % g->depth] = r;
            next = end;
        }
        if (head == tail) {
            break;
        }
        region_wait(g->w, ring[head++ % g->depth], write ? "put" : "get");
    }
    if (write) {
        region_wait(g->w, ucp_ep_flush_nbx(g->ep, &rp), "flush");
    }
}

static long env_long(const char *name, long def, long lo, long hi)
{
    const char *v = getenv(name);
    long n = (v != NULL && *v != '\0') ? atol(v) : def;
    if (n < lo || n > hi) {
        fprintf(stderr, "twin: %s=%s: not in [%ld, %ld]\n", name, v, lo, hi);
        exit(1);
    }
    return n;
}

static void bench_region(const char *tls, int write)
{
    FILE *to_peer, *from_peer;
    char *line = NULL, *s;
    size_t cap = 0, plen;
    void *prkey;
    ucp_context_h saved = ctx;
    ucs_status_t ep_err = UCS_OK;
    struct sockaddr_in sa;
    region_t g;
    pid_t pid = spawn_peer("--region-peer", tls, &to_peer, &from_peer);

    memset(&g, 0, sizeof(g));
    g.chunk = env_long("BENCH_SHARE_CHUNK", 512 << 10, 1, REGION_SIZE);
    g.depth = env_long("BENCH_SHARE_DEPTH", 4, 1, REGION_MAX_DEPTH);
    if (getline(&line, &cap, from_peer) <= 0) {
        fprintf(stderr, "twin: the region peer ended early\n");
        exit(1);
    }
    s = line;
    unsigned port = strtoul(s, &s, 10);
    prkey   = get_hex(&s, &plen);
    g.raddr = strtoull(s, NULL, 10);

    ctx  = new_context(tls);
    g.w  = new_worker();
    memset(&sa, 0, sizeof(sa));
    sa.sin_family      = AF_INET;
    sa.sin_addr        = region_addr();
    sa.sin_port        = htons(port);
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_FLAGS |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER,
                          .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
                          .sockaddr = {.addr = (const struct sockaddr *)&sa, .addrlen = sizeof(sa)},
                          .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                          .err_handler = {.cb = region_ep_err_cb, .arg = &ep_err}};
    CHECK(ucp_ep_create(g.w, &ep, &g.ep));
    ucp_request_param_t fp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK, .cb.send = send_cb};
    region_wait(g.w, ucp_ep_flush_nbx(g.ep, &fp), "wire-up flush");
    CHECK(ucp_ep_rkey_unpack(g.ep, prkey, &g.rkey));
    g.buf = region_buf(3);

    region_move(&g, write);
    START();
    for (long i = 0; i < iters; ++i) {
        region_move(&g, write);
    }
    END();
    if (ep_err != UCS_OK) {
        fprintf(stderr, "twin: endpoint failed: %s\n", ucs_status_string(ep_err));
        exit(1);
    }
    ucp_rkey_destroy(g.rkey);
    close_ep(g.w, g.ep);
    ucp_worker_destroy(g.w);
    ucp_cleanup(ctx);
    ctx = saved;
    end_peer(pid, to_peer, from_peer);
    free(g.buf);
    free(prkey);
    free(line);
}

static void bench_share_read64m(void)  { bench_region(tls_tcp, 0); }
static void bench_share_write64m(void) { bench_region(tls_tcp, 1); }

static const struct { const char *name; void (*fn)(void); } benches[] = {
    {"Register64K", bench_register64k}, {"Register4M", bench_register4m},
    {"Alloc64K", bench_alloc64k}, {"RkeyPack", bench_rkey_pack},
    {"RkeyUnpack", bench_rkey_unpack},
    {"ExportAttempt", bench_export_attempt}, {"ZeroExportImport", bench_zero_export_import},
    {"UCTRegisterPack", bench_uct_register_pack}, {"Put8Flush", bench_put8_flush},
    {"Get8", bench_get8}, {"FetchAdd8", bench_fetch_add8},
    {"TagPingPong8", bench_tag_ping_pong8}, {"Stream64K", bench_stream64k}, {"Put64K", bench_put64k}, {"Put1M", bench_put1m},
    {"Put4M", bench_put4m}, {"Get64K", bench_get64k}, {"Get1M", bench_get1m},
    {"Get4M", bench_get4m}, {"ProgressIdle", bench_progress_idle},
    {"Crossing", bench_crossing},
    {"AMPingPong8Shm", bench_am_ping_pong8_shm}, {"AMPingPong8TCP", bench_am_ping_pong8_tcp},
    {"Put8FlushShm", bench_put8_flush_shm}, {"Put8FlushTCP", bench_put8_flush_tcp},
    {"Get8Shm", bench_get8_shm}, {"Get8TCP", bench_get8_tcp},
    {"ShareRead64M", bench_share_read64m}, {"ShareWrite64M", bench_share_write64m},
};

int main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "--peer") == 0) {
        peer_main(argv[2]);
        return 0;
    }
    if (argc > 2 && strcmp(argv[1], "--region-peer") == 0) {
        region_peer_main(argv[2]);
        return 0;
    }
    iters = argc > 1 ? atol(argv[1]) : 2000;
    ctx = new_context("posix,sysv,self");
    for (size_t b = 0; b < sizeof(benches) / sizeof(benches[0]); ++b) {
        int wanted = argc <= 2;
        for (int a = 2; a < argc; ++a) {
            wanted |= strcmp(argv[a], benches[b].name) == 0;
        }
        if (!wanted) {
            continue;
        }
        benches[b].fn();
        printf("%s %.1f\n", benches[b].name, (loop_end - loop_start) / iters);
        fflush(stdout);
    }
    ucp_cleanup(ctx);
    return 0;
}
