/* C side of the UCP shims declared in include/ucxgo/ucp_shim.h. */
#include "ucxgo/shim.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/shm.h>

/* ---- requests ---------------------------------------------------------- */

static void ucxgo_req_init(void *request)
{
    memset(request, 0, sizeof(ucxgo_req_t));
}

static void ucxgo_req_complete(void *request, ucs_status_t status, size_t length)
{
    ucxgo_req_t *req = request;
    req->status = status;
    req->length = length;
    __atomic_store_n(&req->done, 1, __ATOMIC_RELEASE);
}

/* user_data is the worker: counting completions lets Go wake a goroutine
 * sleeping for one that another goroutine's progress completed. */
static void ucxgo_send_cb(void *request, ucs_status_t status, void *user_data)
{
    ucxgo_req_complete(request, status, 0);
    __atomic_fetch_add(&((ucxgo_worker_t *)user_data)->completions, 1,
                       __ATOMIC_RELEASE);
}

static void ucxgo_recv_am_cb(void *request, ucs_status_t status, size_t length,
                             void *user_data)
{
    ucxgo_req_complete(request, status, length);
    __atomic_fetch_add(&((ucxgo_worker_t *)user_data)->completions, 1,
                       __ATOMIC_RELEASE);
}

static void ucxgo_recv_tag_cb(void *request, ucs_status_t status,
                              const ucp_tag_recv_info_t *info, void *user_data)
{
    if (status == UCS_OK && info != NULL) {
        ((ucxgo_req_t *)request)->tag = info->sender_tag;
    }
    ucxgo_req_complete(request, status, info != NULL ? info->length : 0);
    __atomic_fetch_add(&((ucxgo_worker_t *)user_data)->completions, 1,
                       __ATOMIC_RELEASE);
}

static void ucxgo_recv_stream_cb(void *request, ucs_status_t status,
                                 size_t length, void *user_data)
{
    ucxgo_req_complete(request, status, length);
    __atomic_fetch_add(&((ucxgo_worker_t *)user_data)->completions, 1,
                       __ATOMIC_RELEASE);
}

/* The parameters of every non-blocking call: the send callback (recorded
 * completion), the worker as user data, and the mapping's memh if any. */
static void ucxgo_request_param(ucp_request_param_t *param, ucxgo_worker_t *w,
                                ucp_mem_h memh)
{
    param->op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param->cb.send      = ucxgo_send_cb;
    param->user_data    = w;
    if (memh != NULL) {
        param->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        param->memh          = memh;
    }
}

/* A send or put asked to complete within the call or be refused. */
static void ucxgo_request_imm(ucp_request_param_t *param, int imm)
{
    if (imm) {
        param->op_attr_mask |= UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    }
}

void ucxgo_request_cancel(ucxgo_worker_t *w, void *request)
{
    if (!__atomic_load_n(&((ucxgo_req_t *)request)->done, __ATOMIC_ACQUIRE)) {
        ucp_request_cancel(w->worker, request);
    }
}

void ucxgo_request_release(uintptr_t wh, uintptr_t request, int cancel)
{
    ucxgo_worker_t *w = (ucxgo_worker_t *)wh;
    ucxgo_req_t *req  = (ucxgo_req_t *)request;
    if (cancel && !__atomic_load_n(&req->done, __ATOMIC_ACQUIRE)) {
        ucp_request_cancel(w->worker, req);
    }
    /* UCP reuses request memory; request_init runs only once per element. */
    req->done   = 0;
    req->status = 0;
    req->length = 0;
    req->tag    = 0;
    ucp_request_free(req);
}

/* ---- context ----------------------------------------------------------- */

static ucs_status_t ucxgo_ucp_config_modify(void *config, const char *name,
                                            const char *value)
{
    return ucp_config_modify(config, name, value);
}

ucs_status_t ucxgo_ucp_init(uint64_t features, int mt_workers_shared,
                            const char *kv, unsigned kv_count,
                            const char *name, ucp_context_h *ctx_p,
                            unsigned *failed_kv)
{
    ucp_config_t *config;
    ucp_params_t params;
    ucs_status_t status;
    unsigned api_minor;

    status = ucp_config_read(NULL, NULL, &config);
    if (status != UCS_OK) {
        return status;
    }
    status = ucxgo_apply_config(config, kv, kv_count, ucxgo_ucp_config_modify,
                                "", failed_kv);
    if (status != UCS_OK) {
        goto out;
    }

    memset(&params, 0, sizeof(params));
    params.field_mask        = UCP_PARAM_FIELD_FEATURES |
                               UCP_PARAM_FIELD_REQUEST_SIZE |
                               UCP_PARAM_FIELD_REQUEST_INIT |
                               UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                               UCP_PARAM_FIELD_NAME;
    params.features          = features;
    params.request_size      = sizeof(ucxgo_req_t);
    params.request_init      = ucxgo_req_init;
    params.mt_workers_shared = mt_workers_shared;
    params.name              = name;
    /* ucp_init passes the headers' API minor, and an older library then
     * logs that the application needs a newer UCX: the shims use only what
     * the loaded release has, so claim no more than that release. */
    api_minor = UCP_API_MINOR;
    if (ucxgo_abi()->minor < api_minor) {
        api_minor = ucxgo_abi()->minor;
    }
    status = ucp_init_version(UCP_API_MAJOR, api_minor, &params, config, ctx_p);
out:
    ucp_config_release(config);
    return status;
}

ucs_status_t ucxgo_ucp_query(ucp_context_h ctx, ucxgo_context_info_t *info)
{
    ucp_context_attr_t attr;
    ucs_status_t status;

    memset(&attr, 0, sizeof(attr));
    memset(info, 0, sizeof(*info));
    attr.field_mask = UCP_ATTR_FIELD_REQUEST_SIZE | UCP_ATTR_FIELD_THREAD_MODE |
                      UCP_ATTR_FIELD_MEMORY_TYPES | UCP_ATTR_FIELD_NAME;
    status = ucp_context_query(ctx, &attr);
    if (status != UCS_OK) {
        return status;
    }
    info->request_size = attr.request_size;
    info->thread_mode  = attr.thread_mode;
    info->memory_types = attr.memory_types;
    strncpy(info->name, attr.name, sizeof(info->name) - 1);
    return UCS_OK;
}

/* ---- worker ------------------------------------------------------------ */

ucs_status_t ucxgo_worker_create(ucp_context_h ctx, int thread_mode,
                                 ucxgo_worker_t **w_p)
{
    ucp_worker_params_t params;
    ucxgo_worker_t *w;
    ucs_status_t status;

    w = calloc(1, sizeof(*w));
    if (w == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    memset(&params, 0, sizeof(params));
    params.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    params.thread_mode = (ucs_thread_mode_t)thread_mode;
    status = ucp_worker_create(ctx, &params, &w->worker);
    if (status != UCS_OK) {
        free(w);
        return status;
    }
    *w_p = w;
    return UCS_OK;
}

/* Frees the messages Go took and copied (no crossing of their own). */
static void ucxgo_worker_free_spent(ucxgo_worker_t *w)
{
    if (w->am_spent != NULL) {
        ucxgo_am_msgs_free(w->am_spent);
        w->am_spent = NULL;
    }
}

void ucxgo_worker_destroy(ucxgo_worker_t *w)
{
    ucxgo_worker_free_spent(w);
    ucxgo_am_msgs_free(ucxgo_worker_take_am(w));
    ucp_worker_destroy(w->worker);
    free(w);
}

ucs_status_t ucxgo_worker_max_am_header(ucxgo_worker_t *w, size_t *n)
{
    ucp_worker_attr_t attr;
    ucs_status_t status;

    memset(&attr, 0, sizeof(attr));
    attr.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
    status = ucp_worker_query(w->worker, &attr);
    if (status == UCS_OK) {
        *n = attr.max_am_header;
    }
    return status;
}

ucs_status_t ucxgo_worker_address(ucxgo_worker_t *w, void *buf, size_t cap,
                                  size_t *len)
{
    ucp_address_t *addr;
    ucs_status_t status;
    size_t n;

    status = ucp_worker_get_address(w->worker, &addr, &n);
    if (status != UCS_OK) {
        return status;
    }
    *len = n;
    if (n <= cap) {
        memcpy(buf, addr, n);
    } else {
        status = UCS_ERR_BUFFER_TOO_SMALL;
    }
    ucp_worker_release_address(w->worker, addr);
    return status;
}

unsigned ucxgo_worker_progress(uintptr_t wh)
{
    ucxgo_worker_t *w = (ucxgo_worker_t *)wh;
    ucxgo_worker_free_spent(w);
    return ucp_worker_progress(w->worker);
}

/* A spin in one crossing: up to rounds progress calls, ending early once
 * req (if not NULL) is done or a callback queued work for Go (a message, a
 * connection request, an endpoint error). Returns the sum of the calls'
 * counts: a stream of fragments is progressed without returning to Go.
 * It first frees the messages Go took and copied since the last one. */
unsigned ucxgo_worker_spin(uintptr_t wh, uintptr_t rh, unsigned rounds)
{
    ucxgo_worker_t *w = (ucxgo_worker_t *)wh;
    ucxgo_req_t *req  = (ucxgo_req_t *)rh;
    uint64_t events   = w->events;
    unsigned n      = 0;
    unsigned i;

    ucxgo_worker_free_spent(w);
    for (i = 0; i < rounds; ++i) {
        n += ucp_worker_progress(w->worker);
        if (((req != NULL) &&
             __atomic_load_n(&req->done, __ATOMIC_ACQUIRE)) ||
            (w->events != events)) {
            break;
        }
    }
    return n;
}

ucs_status_t ucxgo_worker_efd(ucxgo_worker_t *w, int *fd)
{
    return ucp_worker_get_efd(w->worker, fd);
}

ucs_status_t ucxgo_worker_arm(ucxgo_worker_t *w)
{
    return ucp_worker_arm(w->worker);
}

ucs_status_t ucxgo_worker_signal(ucxgo_worker_t *w)
{
    return ucp_worker_signal(w->worker);
}

ucs_status_ptr_t ucxgo_worker_flush(ucxgo_worker_t *w)
{
    ucp_request_param_t param;

    ucxgo_request_param(&param, w, NULL);
    return ucp_worker_flush_nbx(w->worker, &param);
}

/* ---- active messages --------------------------------------------------- */

static ucs_status_t ucxgo_am_cb(void *arg, const void *header,
                                size_t header_length, void *data,
                                size_t length, const ucp_am_recv_param_t *param)
{
    ucxgo_am_handler_t *h = arg;
    ucxgo_worker_t *w     = h->worker;
    int rndv              = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    size_t copy           = header_length + (rndv ? 0 : length);
    ucxgo_am_msg_t *m;

    m = malloc(sizeof(*m) + copy);
    if (m == NULL) {
        ++w->am_dropped;
        return UCS_OK; /* UCX releases eager data and drops rendezvous data */
    }
    m->next          = NULL;
    m->id            = h->id;
    m->rndv          = rndv;
    m->data_desc     = rndv ? data : NULL;
    m->reply_ep      = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ?
                       param->reply_ep : NULL;
    m->header_length = header_length;
    m->length        = length;
    m->header        = m->bytes;
    m->data          = m->bytes + header_length;
    if (header_length > 0) {
        memcpy(m->header, header, header_length);
    }
    if (!rndv && length > 0) {
        memcpy(m->data, data, length);
    }
    if (w->am_tail == NULL) {
        w->am_head = m;
    } else {
        w->am_tail->next = m;
    }
    w->am_tail = m;
    ++w->events;
    /* Rendezvous data waits in UCX for ucp_am_recv_data_nbx or release. */
    return rndv ? UCS_INPROGRESS : UCS_OK;
}

ucxgo_am_msg_t *ucxgo_worker_take_am(ucxgo_worker_t *w)
{
    ucxgo_am_msg_t *m = w->am_head;
    w->am_head = w->am_tail = NULL;
    return m;
}

void ucxgo_am_msgs_free(ucxgo_am_msg_t *m)
{
    while (m != NULL) {
        ucxgo_am_msg_t *next = m->next;
        free(m);
        m = next;
    }
}

ucs_status_t ucxgo_worker_set_am_handler(ucxgo_worker_t *w, unsigned id,
                                         ucxgo_am_handler_t **h_p)
{
    ucp_am_handler_param_t param;
    ucxgo_am_handler_t *h;
    ucs_status_t status;

    h = calloc(1, sizeof(*h));
    if (h == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    h->worker        = w;
    h->id            = id;
    param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                       UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                       UCP_AM_HANDLER_PARAM_FIELD_CB |
                       UCP_AM_HANDLER_PARAM_FIELD_ARG;
    param.id         = id;
    param.flags      = UCP_AM_FLAG_WHOLE_MSG;
    param.cb         = ucxgo_am_cb;
    param.arg        = h;
    status = ucp_worker_set_am_recv_handler(w->worker, &param);
    if (status != UCS_OK) {
        free(h);
        return status;
    }
    *h_p = h;
    return UCS_OK;
}

void ucxgo_worker_clear_am_handler(ucxgo_worker_t *w, unsigned id,
                                   ucxgo_am_handler_t *h)
{
    ucp_am_handler_param_t param;

    param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                       UCP_AM_HANDLER_PARAM_FIELD_CB;
    param.id         = id;
    param.cb         = NULL;
    ucp_worker_set_am_recv_handler(w->worker, &param);
    free(h);
}

ucs_status_t ucxgo_worker_cover_am_ids(ucxgo_worker_t *w)
{
    ucp_am_handler_param_t param;
    ucs_status_t status;
    unsigned id;

    param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                       UCP_AM_HANDLER_PARAM_FIELD_CB;
    param.cb         = NULL;
    for (id = 0; id <= UINT16_MAX; ++id) {
        param.id = id;
        status   = ucp_worker_set_am_recv_handler(w->worker, &param);
        if (status != UCS_OK) {
            return status;
        }
    }
    return UCS_OK;
}

ucs_status_ptr_t ucxgo_am_send(uintptr_t eh, unsigned id, const void *header,
                               size_t header_len, const void *data, size_t len,
                               uintptr_t memh, unsigned flags, int imm)
{
    ucxgo_ep_t *ep = (ucxgo_ep_t *)eh;
    ucp_request_param_t param;

    ucxgo_request_param(&param, ep->worker, (ucp_mem_h)memh);
    ucxgo_request_imm(&param, imm);
    /* The header is copied, so Go need not keep it alive. */
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    param.flags         = flags | UCP_AM_SEND_FLAG_COPY_HEADER;
    return ucp_am_send_nbx(ep->ep, id, header, header_len, data, len, &param);
}

ucs_status_ptr_t ucxgo_am_recv_data(uintptr_t wh, void *desc, void *buf,
                                    size_t len, uintptr_t memh)
{
    ucxgo_worker_t *w = (ucxgo_worker_t *)wh;
    ucp_request_param_t param;

    ucxgo_request_param(&param, w, (ucp_mem_h)memh);
    param.cb.recv_am = ucxgo_recv_am_cb;
    return ucp_am_recv_data_nbx(w->worker, desc, buf, len, &param);
}

void ucxgo_am_data_release(ucxgo_worker_t *w, void *desc)
{
    ucp_am_data_release(w->worker, desc);
}

/* ---- listener and endpoints -------------------------------------------- */

static void ucxgo_refused_ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
}

/* Rejects a connection request. With refuse_by_closing it accepts it and
 * force-closes the endpoint at once instead: UCX 1.16 and 1.17 replay a
 * write event of the rejected connection to the next one that reuses its
 * socket (assertion in uct_tcp_sockcm_ep_progress_send, 11 of 15 runs of
 * 7 connections on 1.16.0), which accept and force close does not meet
 * (0 of 20). The client then sees its endpoint reset, not rejected. */
static ucs_status_t ucxgo_listener_refuse(ucxgo_listener_t *l,
                                          ucp_conn_request_h request)
{
    ucp_ep_params_t params;
    ucp_request_param_t close_param;
    ucs_status_ptr_t close_req;
    ucs_status_t status;
    ucp_ep_h ep;

    if (!l->refuse_by_closing) {
        return ucp_listener_reject(l->listener, request);
    }
    memset(&params, 0, sizeof(params));
    params.field_mask     = UCP_EP_PARAM_FIELD_CONN_REQUEST |
                            UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                            UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.conn_request   = request;
    params.err_mode       = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = ucxgo_refused_ep_err_cb;
    status = ucp_ep_create(l->worker->worker, &params, &ep);
    if (status != UCS_OK) {
        return status; /* UCX released the request */
    }
    memset(&close_param, 0, sizeof(close_param));
    close_param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    close_param.flags        = UCP_EP_CLOSE_FLAG_FORCE;
    close_req = ucp_ep_close_nbx(ep, &close_param);
    if (UCS_PTR_IS_PTR(close_req)) {
        ucp_request_free(close_req); /* UCX finishes it on progress */
    }
    return UCS_OK;
}

static void ucxgo_conn_cb(ucp_conn_request_h request, void *arg)
{
    ucxgo_listener_t *l = arg;
    ucp_conn_request_attr_t attr;
    ucxgo_conn_t *c;

    c = l->closed ? NULL : calloc(1, sizeof(*c));
    if (c == NULL) {
        ucxgo_listener_refuse(l, request);
        return;
    }
    c->request      = request;
    attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
    if (ucp_conn_request_query(request, &attr) == UCS_OK) {
        c->client_addr = attr.client_address;
    }
    if (l->tail == NULL) {
        l->head = c;
    } else {
        l->tail->next = c;
    }
    l->tail = c;
    ++l->worker->events;
}

ucs_status_t ucxgo_listener_create(ucxgo_worker_t *w, const struct sockaddr *addr,
                                   socklen_t addrlen, int refuse_by_closing,
                                   ucxgo_listener_t **l_p,
                                   struct sockaddr_storage *bound)
{
    ucp_listener_params_t params;
    ucp_listener_attr_t attr;
    ucxgo_listener_t *l;
    ucs_status_t status;

    l = calloc(1, sizeof(*l));
    if (l == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    l->worker                = w;
    l->refuse_by_closing     = refuse_by_closing;
    params.field_mask        = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                               UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    params.sockaddr.addr     = addr;
    params.sockaddr.addrlen  = addrlen;
    params.conn_handler.cb   = ucxgo_conn_cb;
    params.conn_handler.arg  = l;
    status = ucp_listener_create(w->worker, &params, &l->listener);
    if (status != UCS_OK) {
        free(l);
        return status;
    }
    attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    status = ucp_listener_query(l->listener, &attr);
    if (status != UCS_OK) {
        ucp_listener_destroy(l->listener);
        free(l);
        return status;
    }
    *bound = attr.sockaddr;
    *l_p   = l;
    return UCS_OK;
}

/* A closed listener stays in UCX until its worker goes: UCX 1.16 to 1.23
 * deliver the request of a connection accepted before ucp_listener_destroy
 * to the freed listener (SIGSEGV in ucp_cm_server_conn_request_cb). */
void ucxgo_listener_close(ucxgo_listener_t *l)
{
    ucxgo_conn_t *c;

    l->closed = 1;
    while ((c = ucxgo_listener_take(l)) != NULL) {
        ucxgo_listener_reject(l, c);
    }
}

void ucxgo_listener_destroy(ucxgo_listener_t *l)
{
    ucxgo_conn_t *c;

    ucp_listener_destroy(l->listener);
    while ((c = ucxgo_listener_take(l)) != NULL) {
        free(c); /* requests of a destroyed listener are void */
    }
    free(l);
}

ucxgo_conn_t *ucxgo_listener_take(ucxgo_listener_t *l)
{
    ucxgo_conn_t *c = l->head;
    if (c != NULL) {
        l->head = c->next;
        if (l->head == NULL) {
            l->tail = NULL;
        }
        c->next = NULL;
    }
    return c;
}

ucs_status_t ucxgo_listener_reject(ucxgo_listener_t *l, ucxgo_conn_t *c)
{
    ucs_status_t status = ucxgo_listener_refuse(l, c->request);
    free(c);
    return status;
}

static void ucxgo_ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    ucxgo_ep_t *e = arg;
    e->error = status;
    ++e->worker->ep_errors;
    ++e->worker->events;
}

static ucs_status_t ucxgo_ep_create(ucxgo_worker_t *w, ucp_ep_params_t *params,
                                    int err_mode_peer, ucxgo_ep_t **ep_p)
{
    ucxgo_ep_t *e;
    ucs_status_t status;

    e = calloc(1, sizeof(*e));
    if (e == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    e->worker = w;
    if (err_mode_peer) {
        params->field_mask     |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
        params->err_mode        = UCP_ERR_HANDLING_MODE_PEER;
        params->err_handler.cb  = ucxgo_ep_err_cb;
        params->err_handler.arg = e;
    }
    status = ucp_ep_create(w->worker, params, &e->ep);
    if (status != UCS_OK) {
        free(e);
        return status;
    }
    *ep_p = e;
    return UCS_OK;
}

ucs_status_t ucxgo_ep_create_addr(ucxgo_worker_t *w, const void *addr,
                                  int err_mode_peer, ucxgo_ep_t **ep_p)
{
    ucp_ep_params_t params;

    memset(&params, 0, sizeof(params));
    params.field_mask     = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    params.address        = addr;
    return ucxgo_ep_create(w, &params, err_mode_peer, ep_p);
}

ucs_status_t ucxgo_ep_create_sockaddr(ucxgo_worker_t *w, const struct sockaddr *addr,
                                      socklen_t addrlen, int err_mode_peer,
                                      ucxgo_ep_t **ep_p)
{
    ucp_ep_params_t params;

    memset(&params, 0, sizeof(params));
    params.field_mask       = UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_FLAGS;
    params.flags            = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    params.sockaddr.addr    = addr;
    params.sockaddr.addrlen = addrlen;
    return ucxgo_ep_create(w, &params, err_mode_peer, ep_p);
}

ucs_status_t ucxgo_ep_create_conn(ucxgo_worker_t *w, ucxgo_conn_t *c,
                                  int err_mode_peer, ucxgo_ep_t **ep_p)
{
    ucp_ep_params_t params;
    ucs_status_t status;

    memset(&params, 0, sizeof(params));
    params.field_mask   = UCP_EP_PARAM_FIELD_CONN_REQUEST;
    params.conn_request = c->request;
    status = ucxgo_ep_create(w, &params, err_mode_peer, ep_p);
    free(c);
    return status;
}

ucs_status_ptr_t ucxgo_ep_close(ucxgo_ep_t *e, int force)
{
    ucp_request_param_t param;

    ucxgo_request_param(&param, e->worker, NULL);
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    param.flags         = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    return ucp_ep_close_nbx(e->ep, &param);
}

void ucxgo_ep_free(ucxgo_ep_t *e)
{
    free(e);
}

ucs_status_ptr_t ucxgo_ep_flush(uintptr_t eh)
{
    ucxgo_ep_t *e = (ucxgo_ep_t *)eh;
    ucp_request_param_t param;

    ucxgo_request_param(&param, e->worker, NULL);
    return ucp_ep_flush_nbx(e->ep, &param);
}

/* ---- memory ------------------------------------------------------------ */

ucxgo_result_t ucxgo_mem_map(ucp_context_h ctx, void *address, size_t length,
                             int allocate, unsigned prot, int mem_type,
                             const void *exported)
{
    ucp_mem_map_params_t params;
    ucp_mem_attr_t attr;
    ucxgo_result_t r = {0};
    ucp_mem_h memh;

    memset(&params, 0, sizeof(params));
    if (exported != NULL) {
        params.field_mask           = UCP_MEM_MAP_PARAM_FIELD_EXPORTED_MEMH_BUFFER;
        params.exported_memh_buffer = exported;
    } else {
        params.field_mask  = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                             UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                             UCP_MEM_MAP_PARAM_FIELD_FLAGS |
                             UCP_MEM_MAP_PARAM_FIELD_PROT |
                             UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
        params.address     = address;
        params.length      = length;
        params.flags       = allocate ? UCP_MEM_MAP_ALLOCATE : 0;
        params.prot        = prot;
        params.memory_type = (ucs_memory_type_t)mem_type;
    }
    r.status = ucp_mem_map(ctx, &params, &memh);
    if (r.status != UCS_OK) {
        return r;
    }
    r.handle = memh;
    if ((exported == NULL) && !allocate) {
        r.address = address; /* registered: the caller's own range */
        r.length  = length;
        return r;
    }
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    r.status = ucp_mem_query(memh, &attr);
    if (r.status != UCS_OK) {
        ucp_mem_unmap(ctx, memh);
        r.handle = NULL;
        return r;
    }
    r.address = attr.address;
    r.length  = attr.length;
    return r;
}

ucs_status_t ucxgo_mem_unmap(ucp_context_h ctx, ucp_mem_h memh)
{
    return ucp_mem_unmap(ctx, memh);
}

/* Copies a packed buffer of n bytes out when it fits in cap. */
static ucxgo_result_t ucxgo_copy_packed(ucs_status_t status, const void *buf,
                                        size_t n, void *out, size_t cap)
{
    ucxgo_result_t r = {0};

    r.status = status;
    if (status != UCS_OK) {
        return r;
    }
    r.length = n;
    if (n <= cap) {
        memcpy(out, buf, n);
    } else {
        r.status = UCS_ERR_BUFFER_TOO_SMALL;
    }
    return r;
}

ucxgo_result_t ucxgo_memh_export(ucp_context_h ctx, ucp_mem_h memh, void *out,
                                 size_t cap)
{
    ucp_memh_pack_params_t params;
    ucp_memh_buffer_release_params_t release;
    ucs_status_t status;
    ucxgo_result_t r;
    void *buf = NULL;
    size_t n  = 0;

    params.field_mask = UCP_MEMH_PACK_PARAM_FIELD_FLAGS;
    params.flags      = UCP_MEMH_PACK_FLAG_EXPORT;
    status = ucp_memh_pack(memh, &params, &buf, &n);
    r      = ucxgo_copy_packed(status, buf, n, out, cap);
    if (status == UCS_OK) {
        release.field_mask = 0;
        ucp_memh_buffer_release(buf, &release);
    }
    return r;
}

ucxgo_result_t ucxgo_rkey_pack(ucp_context_h ctx, ucp_mem_h memh, void *out,
                               size_t cap)
{
    ucs_status_t status;
    ucxgo_result_t r;
    void *buf = NULL;
    size_t n  = 0;

    status = ucp_rkey_pack(ctx, memh, &buf, &n);
    r      = ucxgo_copy_packed(status, buf, n, out, cap);
    if (status == UCS_OK) {
        ucp_rkey_buffer_release(buf);
    }
    return r;
}

ucxgo_result_t ucxgo_ep_rkey_unpack(ucxgo_ep_t *e, const void *buf, size_t len)
{
    ucxgo_result_t r = {0};
    ucp_rkey_h rkey  = NULL;

    r.status = ucp_ep_rkey_unpack(e->ep, buf, &rkey);
    r.handle = rkey;
    return r;
}

void ucxgo_rkey_destroy(ucp_rkey_h rkey)
{
    ucp_rkey_destroy(rkey);
}

ucs_status_t ucxgo_ep_rkey_reader(ucxgo_ep_t *e, const void *buf, size_t len,
                                  int *mapped, uint64_t *marker)
{
    ucp_rkey_h rkey = NULL;
    void *local     = NULL;
    ucs_status_t status;

    *mapped = 0;
    *marker = 0;
    status  = ucp_ep_rkey_unpack(e->ep, buf, &rkey);
    if (status != UCS_OK) {
        return status;
    }
    if (ucp_rkey_ptr(rkey, 0, &local) == UCS_OK && local != NULL) {
        *mapped = 1;
        memcpy(marker, local, sizeof(*marker));
    }
    ucp_rkey_destroy(rkey);
    return UCS_OK;
}

int ucxgo_sysv_marked_segment(uint64_t marker, void **addr)
{
    int id = shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600);
    void *p;

    if (id < 0) {
        return -errno;
    }
    p = shmat(id, NULL, 0);
    if (p == (void *)-1) {
        int err = errno;
        shmctl(id, IPC_RMID, NULL);
        return -err;
    }
    memcpy(p, &marker, sizeof(marker));
    shmctl(id, IPC_RMID, NULL);
    *addr = p;
    return id;
}

void ucxgo_sysv_detach(void *addr)
{
    shmdt(addr);
}

/* ---- RMA ---------------------------------------------------------------- */

ucs_status_ptr_t ucxgo_put(uintptr_t eh, const void *buf, size_t len,
                           uintptr_t memh, uint64_t raddr, uintptr_t rkey)
{
    ucxgo_ep_t *e = (ucxgo_ep_t *)eh;
    ucp_request_param_t param;
    ucxgo_request_param(&param, e->worker, (ucp_mem_h)memh);
    return ucp_put_nbx(e->ep, buf, len, raddr, (ucp_rkey_h)rkey, &param);
}

ucs_status_ptr_t ucxgo_get(uintptr_t eh, void *buf, size_t len,
                           uintptr_t memh, uint64_t raddr, uintptr_t rkey)
{
    ucxgo_ep_t *e = (ucxgo_ep_t *)eh;
    ucp_request_param_t param;
    ucxgo_request_param(&param, e->worker, (ucp_mem_h)memh);
    return ucp_get_nbx(e->ep, buf, len, raddr, (ucp_rkey_h)rkey, &param);
}

/* ---- tag matching and streams ------------------------------------------ */

ucs_status_ptr_t ucxgo_tag_send(uintptr_t eh, uint64_t tag, const void *buf,
                                size_t len, uintptr_t memh, int imm)
{
    ucxgo_ep_t *e = (ucxgo_ep_t *)eh;
    ucp_request_param_t param;
    ucxgo_request_param(&param, e->worker, (ucp_mem_h)memh);
    ucxgo_request_imm(&param, imm);
    return ucp_tag_send_nbx(e->ep, buf, len, tag, &param);
}

ucs_status_ptr_t ucxgo_tag_recv(uintptr_t wh, void *buf, size_t len,
                                uint64_t tag, uint64_t mask, uintptr_t memh)
{
    ucxgo_worker_t *w = (ucxgo_worker_t *)wh;
    ucp_request_param_t param;
    ucp_tag_recv_info_t info = {0};
    ucs_status_ptr_t r;

    ucxgo_request_param(&param, w, (ucp_mem_h)memh);
    param.cb.recv             = ucxgo_recv_tag_cb;
    param.op_attr_mask       |= UCP_OP_ATTR_FIELD_RECV_INFO;
    param.recv_info.tag_info  = &info;
    r = ucp_tag_recv_nbx(w->worker, buf, len, tag, mask, &param);
    w->imm_len = info.length;
    w->imm_tag = info.sender_tag;
    return r;
}

int ucxgo_tag_probe(ucxgo_worker_t *w, uint64_t tag, uint64_t mask)
{
    ucp_tag_recv_info_t info;
    if (ucp_tag_probe_nb(w->worker, tag, mask, 0, &info) == NULL) {
        return 0;
    }
    w->imm_len = info.length;
    w->imm_tag = info.sender_tag;
    return 1;
}

ucs_status_ptr_t ucxgo_stream_send(uintptr_t eh, const void *buf, size_t len,
                                   uintptr_t memh)
{
    ucxgo_ep_t *e = (ucxgo_ep_t *)eh;
    ucp_request_param_t param;
    ucxgo_request_param(&param, e->worker, (ucp_mem_h)memh);
    return ucp_stream_send_nbx(e->ep, buf, len, &param);
}

ucs_status_ptr_t ucxgo_stream_recv(uintptr_t eh, void *buf, size_t len,
                                   uintptr_t memh, int waitall)
{
    ucxgo_ep_t *e = (ucxgo_ep_t *)eh;
    ucp_request_param_t param;
    size_t n = 0;
    ucs_status_ptr_t r;

    ucxgo_request_param(&param, e->worker, (ucp_mem_h)memh);
    param.cb.recv_stream = ucxgo_recv_stream_cb;
    if (waitall) {
        param.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
        param.flags         = UCP_STREAM_RECV_FLAG_WAITALL;
    }
    r = ucp_stream_recv_nbx(e->ep, buf, len, &n, &param);
    e->worker->imm_len = n;
    return r;
}

/* No memh (UCX refuses one for atomics); NO_IMM_CMPL is not asked for, so
 * a post UCX packed at once completes at once. */
ucs_status_ptr_t ucxgo_atomic(uintptr_t eh, unsigned op, unsigned size,
                              uintptr_t operand, uintptr_t reply, uint64_t raddr,
                              uintptr_t rkey)
{
    ucxgo_ep_t *e = (ucxgo_ep_t *)eh;
    ucp_request_param_t param;
    ucxgo_request_param(&param, e->worker, NULL);
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
    param.datatype      = ucp_dt_make_contig(size);
    if (reply != 0) {
        param.op_attr_mask |= UCP_OP_ATTR_FIELD_REPLY_BUFFER;
        param.reply_buffer  = (void *)reply;
    }
    return ucp_atomic_op_nbx(e->ep, (ucp_atomic_op_t)op, (const void *)operand,
                             1, raddr, (ucp_rkey_h)rkey, &param);
}
