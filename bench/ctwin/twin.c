/*
 * The C twin of bench/bench_test.go: the same UCX calls with the same
 * parameters, timed the same way (a loop of N operations). Prints one line
 * per benchmark: "name ns/op". Usage: twin N [name...]
 */
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <uct/api/uct.h>

#define CHECK(_expr) do { ucs_status_t _s = (_expr); if (_s != UCS_OK) { \
        fprintf(stderr, "%s: %s\n", #_expr, ucs_status_string(_s)); exit(1); } } while (0)

typedef struct { int done; ucs_status_t status; } req_t;

static ucp_context_h ctx;
static long iters;
static double loop_start, loop_end; /* each benchmark times its loop only */
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

static void init_context(void)
{
    ucp_config_t *config;
    ucp_params_t params;

    CHECK(ucp_config_read(NULL, NULL, &config));
    CHECK(ucp_config_modify(config, "TLS", "posix,sysv,self"));
    memset(&params, 0, sizeof(params));
    params.field_mask        = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_REQUEST_SIZE |
                               UCP_PARAM_FIELD_REQUEST_INIT | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features          = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    params.request_size      = sizeof(req_t);
    params.request_init      = req_init;
    params.mt_workers_shared = 1;
    CHECK(ucp_init(&params, config, &ctx));
    ucp_config_release(config);
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

/* A client worker and a server worker progressed by a thread that sleeps
 * on the event fd when idle, as ucx-go's Worker.Run does. */
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
        int spins = 0;
        while (spins < 64) {
            spins = ucp_worker_progress(server) ? 0 : spins + 1;
        }
        if (ucp_worker_arm(server) == UCS_OK) {
            poll(&pfd, 1, 50);
        }
    }
    return NULL;
}

static void wait_req(void *r)
{
    if (r == NULL) {
        return;
    }
    if (UCS_PTR_IS_ERR(r)) {
        fprintf(stderr, "op: %s\n", ucs_status_string(UCS_PTR_STATUS(r)));
        exit(1);
    }
    while (!((req_t *)r)->done) {
        ucp_worker_progress(client);
    }
    ((req_t *)r)->done = 0;
    ucp_request_free(r);
}

static void rma_bench(size_t n, int put, int flush)
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
    ucp_rkey_buffer_release(packed);
    stop_server = 0;
    pthread_create(&th, NULL, server_loop, NULL);

    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_MEMH;
    rp.cb.send      = send_cb;
    rp.memh         = local;
    uint64_t raddr  = (uint64_t)mem_addr(target);
    void *lbuf      = mem_addr(local);
    START();
    for (long i = 0; i < iters; ++i) {
        wait_req(put ? ucp_put_nbx(ep, lbuf, n, raddr, rkey, &rp)
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

static void bench_put8_flush(void) { rma_bench(8, 1, 1); }
static void bench_get8(void)       { rma_bench(8, 0, 0); }
static void bench_put64k(void)     { rma_bench(64 << 10, 1, 0); }
static void bench_put1m(void)      { rma_bench(1 << 20, 1, 0); }
static void bench_put4m(void)      { rma_bench(4 << 20, 1, 0); }
static void bench_get64k(void)     { rma_bench(64 << 10, 0, 0); }
static void bench_get1m(void)      { rma_bench(1 << 20, 0, 0); }
static void bench_get4m(void)      { rma_bench(4 << 20, 0, 0); }

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

static const struct { const char *name; void (*fn)(void); } benches[] = {
    {"Register64K", bench_register64k}, {"Register4M", bench_register4m},
    {"Alloc64K", bench_alloc64k}, {"RkeyPack", bench_rkey_pack},
    {"ExportAttempt", bench_export_attempt}, {"ZeroExportImport", bench_zero_export_import},
    {"UCTRegisterPack", bench_uct_register_pack}, {"Put8Flush", bench_put8_flush},
    {"Get8", bench_get8}, {"Put64K", bench_put64k}, {"Put1M", bench_put1m},
    {"Put4M", bench_put4m}, {"Get64K", bench_get64k}, {"Get1M", bench_get1m},
    {"Get4M", bench_get4m}, {"ProgressIdle", bench_progress_idle},
};

int main(int argc, char **argv)
{
    iters = argc > 1 ? atol(argv[1]) : 2000;
    init_context();
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
